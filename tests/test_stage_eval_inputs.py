"""The stage layer reads configs for `lengthpred.eval` (which never imports Hydra): a run's saved config gives
the same provenance as the live one, a change to what the targets are changes the hash, and the eval group
becomes plain settings with a typo named."""

from __future__ import annotations

from omegaconf import OmegaConf

from lengthpred.stages.provenance import provenance, provenance_of
from tests.conftest import compose_cfg


def test_a_saved_run_config_has_the_live_configs_provenance(tmp_path):
    cfg = compose_cfg(["experiment=demo"], tmp_path)
    OmegaConf.save(cfg, tmp_path / "config.yaml")  # what Hydra writes into <run>/.hydra/
    live = provenance(cfg)
    of = provenance_of(cfg)
    assert of(None) == live and of(tmp_path / "config.yaml") == live
    assert (live.experiment, live.model, live.data) == ("demo", "smollm2-135m", "demo")
    other = provenance(compose_cfg(["experiment=demo", "generate.temperature=0.1"], tmp_path))
    assert other.config_hash != live.config_hash
    moved = provenance(compose_cfg(["experiment=demo", f"paths.data_dir={tmp_path}"], tmp_path))
    assert moved.config_hash == live.config_hash  # where files live is not what the targets are


def test_no_config_is_an_empty_ones_provenance():
    p = provenance_of(None)(None)
    assert (p.experiment, p.model, p.data) == ("default", "unknown", "unknown")


def test_eval_settings_are_plain_and_a_typo_is_named(tmp_path):
    import pytest

    from lengthpred.errors import ConfigError
    from lengthpred.eval.settings import EvalSettings, PairedSettings
    from lengthpred.stages.evaluate import eval_settings

    s = eval_settings(compose_cfg(["experiment=demo", "eval.n_boot=7", "seed=3"], tmp_path))
    assert s.n_boot == 7 and s.seed == 3 and s.paired == PairedSettings() and s.metrics[0] == "spearman"
    assert s.scoring()["params"] == {"bucket_accuracy": {"edges": [64, 128, 256, 512, 1024, 2048]}}
    with pytest.raises(ConfigError, match=r"eval: unknown keys \['n_bootstrap'\]"):
        EvalSettings.from_mapping({"n_bootstrap": 5})
    with pytest.raises(ConfigError, match=r"eval.paired: unknown keys \['baseline'\]"):
        EvalSettings.from_mapping({"paired": {"baseline": ["static"]}})
