"""One readout setting (conf/readout): the feature, α grid and λ grid that head=linear / head=probe train on,
the online stage adapts, the serve stage runs and the costs stage times. With those heads the readout follows
the head, so `head.layer=15` moves all four; a readout set apart from such a head is refused."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from lengthpred.costs.measure import CostSettings, OnlineCosts, Sample, _online_costs
from lengthpred.errors import ConfigError
from lengthpred.names import FeatureKey
from lengthpred.online.experiment import AdaptSettings
from lengthpred.stages.heads import feature_name
from lengthpred.stages.serve import readout_key
from lengthpred.stages.validate import validate
from tests.conftest import compose_cfg


def _read_by_every_stage(overrides: list[str]) -> dict[str, str]:
    """The feature column each stage reads under `overrides`, through the code each stage runs."""
    cfg = compose_cfg(overrides)
    validate(cfg)
    online = OmegaConf.to_container(cfg.online, resolve=True)
    asked: list[str] = []

    def columns(name: str) -> np.ndarray:
        asked.append(name)
        return np.random.default_rng(0).normal(size=(4, 3))

    sample = Sample(ids=list("abcd"), texts=list("abcd"), domains=list("aabb"), columns=columns)
    rows, _, _ = _online_costs(OnlineCosts.from_cfg(online), sample, CostSettings(predict_repeats=1), None)
    assert {r["feature"] for r in rows.values()} == set(asked)
    return {
        "train": feature_name(OmegaConf.to_container(cfg.head, resolve=True)),
        "adapt": AdaptSettings.from_mapping(online).feature,
        "serve": str(readout_key(cfg.serve)),
        "costs": asked[0],
    }


def test_the_default_readout_is_layer_20_last_everywhere():
    assert set(_read_by_every_stage([]).values()) == {"hs.L20.last"}


def test_head_layer_moves_adaptation_serving_and_costs_too():
    assert set(_read_by_every_stage(["head.layer=15"]).values()) == {"hs.L15.last"}
    assert set(_read_by_every_stage(["head=probe", "head.layer=7"]).values()) == {"hs.L7.last"}


def test_another_head_leaves_the_readout_at_its_defaults_and_readout_layer_moves_it():
    egtp = _read_by_every_stage(["head=egtp", "head.layer=15"])
    assert egtp["train"] == "hs.L15.entropy" and {egtp["adapt"], egtp["serve"], egtp["costs"]} == {"hs.L20.last"}
    moved = _read_by_every_stage(["head=egtp", "readout.layer=12"])
    assert {moved["adapt"], moved["serve"], moved["costs"]} == {"hs.L12.last"}


def test_a_layer_sweeps_choice_moves_every_stage(tmp_path):
    """`${lp.chosen_layer:<run>,<head>}` reads a sweep's layer_choice.json (the file or its run folder)."""
    from lengthpred.heads.layer_choice import write_choice

    write_choice({"linear": {"layer": 18}, "probe": {"layer": 16}}, tmp_path, model="m", data="d")
    assert set(_read_by_every_stage([f"head.layer=${{lp.chosen_layer:{tmp_path},linear}}"]).values()) == {"hs.L18.last"}
    probe = _read_by_every_stage(["head=probe", f"head.layer=${{lp.chosen_layer:{tmp_path}/layer_choice.json,probe}}"])
    assert set(probe.values()) == {"hs.L16.last"}
    egtp = _read_by_every_stage(["head=egtp", f"readout.layer=${{lp.chosen_layer:{tmp_path},linear}}"])
    assert {egtp["adapt"], egtp["serve"], egtp["costs"]} == {"hs.L18.last"}


def test_a_missing_or_partial_layer_choice_is_one_line(tmp_path, capsys):
    """A choice file that is not there, or chose no layer for the head, stops the script in one line."""
    from lengthpred.cli import stage
    from lengthpred.heads.layer_choice import write_choice

    def main(cfg):
        raise AssertionError("ran although the config cannot resolve")

    for overrides, says in (([f"head.layer=${{lp.chosen_layer:{tmp_path / 'none'},linear}}"], "no layer choice at"),
                            ([f"head.layer=${{lp.chosen_layer:{tmp_path},probe}}"], "not 'probe'")):
        write_choice({"linear": {"layer": 18}}, tmp_path, model="m", data="d")
        with pytest.raises(SystemExit) as e:
            stage(main)(compose_cfg(overrides))
        err = capsys.readouterr().err
        assert e.value.code == 2 and says in err and err.count("\n") == 1, err


def test_the_readout_defaults_agree_with_the_readout_heads_own():
    """conf/readout/default.yaml and head=linear / head=probe each spell layer 20, last: they must agree."""
    base = OmegaConf.to_container(compose_cfg(["head=egtp"]).readout, resolve=True)
    for head in ("linear", "probe"):
        cfg = compose_cfg([f"head={head}"])
        assert OmegaConf.to_container(cfg.readout, resolve=True) == base | {"follows_head": True}
        assert (cfg.head.layer, cfg.head.pooling) == (base["layer"], base["pooling"])
    assert base["alphas"] == [0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0]
    assert base["forgetting"] == [1.0, 0.999, 0.99]


def test_a_readout_set_apart_from_its_head_is_refused():
    with pytest.raises(ConfigError, match=r"^readout.layer=15 but head.layer=20: .* set head.layer instead"):
        validate(compose_cfg(["readout.layer=15"]))


def test_serving_refuses_a_pooling_its_sources_do_not_compute():
    cfg = compose_cfg(["head.pooling=mean"])
    assert AdaptSettings.from_mapping(OmegaConf.to_container(cfg.online, resolve=True)).feature == "hs.L20.mean"
    with pytest.raises(ConfigError, match=r"^serve.predictor.pooling='mean': the serving readout reads"):
        readout_key(cfg.serve)
    assert readout_key(OmegaConf.create({"predictor": {"layer": 3}})) == FeatureKey(3, "last")  # older runs
