"""run_training (select on val, score on test), its bad-input errors, and scripts/train.py's stage end to end."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from lengthpred.errors import ConfigError, DataError
from lengthpred.heads import HeadInput, HeadSettings, LabeledSet, run_training
from lengthpred.heads.assemble import indomain_ids, labeled_set
from lengthpred.heads.training import PREDICTION_COLUMNS
from lengthpred.paths import REPO_ROOT
from lengthpred.targets import target_frame as target_table
from tests.conftest import compose_cfg

LINEAR = HeadSettings.from_mapping({
    "layer": 20,
    "pooling": "last",
    "params": {"_target_": "x"},
    "select": {"alpha": [0.1, 1e4]},
})


def make_set(n: int, seed: int, d: int = 8, capped: float = 0.0) -> LabeledSet:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = np.round(np.expm1(4 + 0.8 * X[:, 0] + 0.1 * rng.normal(size=n)))
    inp = HeadInput(ids=[f"{seed}-{i}" for i in range(n)], features=X, domains=["math", "chat"] * (n // 2))
    cf = np.where(np.arange(n) < capped * n, 0.5, 0.0)
    return LabeledSet(inp, y, n_samples=np.full(n, 4), capped_frac=cf)


def test_run_training_selects_on_val_and_reports():
    train, val, test = make_set(60, 0, capped=0.1), make_set(20, 1), make_set(20, 2, capped=0.5)
    head, metrics, preds = run_training("linear", LINEAR, train, val, test, split="indomain/all/test")
    assert metrics["selected"]["alpha"] in (0.1, 1e4) and metrics["n_candidates"] == 2
    assert head.alpha == metrics["selected"]["alpha"]
    assert metrics["spearman"] > 0.8 and metrics["kendall"] > 0.6 and metrics["mae"] > 0
    assert (metrics["n_train"], metrics["n_val"], metrics["n_test"]) == (60, 20, 20)
    assert metrics["n_capped_train"] == 6 and metrics["n_capped_test"] == 10 and metrics["n_capped"] == 16
    assert (metrics["head"], metrics["layer"], metrics["pooling"]) == ("linear", 20, "last")
    assert metrics["n_parameters"] == 9
    assert list(preds.columns) == [*PREDICTION_COLUMNS, "y_pred_median", "y_pred_mean"] and len(preds) == 20
    assert set(preds["domain"]) == {"math", "chat"} and (preds["n_samples"] == 4).all()
    np.testing.assert_array_equal(preds["y_pred"], head.predict(test.inputs.features))


def test_val_rows_are_the_kept_heads_predictions_on_val():
    train, val, test = make_set(60, 0), make_set(20, 1), make_set(20, 2)
    head, _, preds = run_training("linear", LINEAR, train, val, test, split="t", val_split="v")
    assert preds["split"].value_counts().to_dict() == {"t": 20, "v": 20}
    rows = preds[preds["split"] == "v"]
    assert rows["id"].tolist() == val.inputs.ids and np.array_equal(rows["y_true"], val.y)
    np.testing.assert_array_equal(rows["y_pred"], head.predict(val.inputs.features))


def test_constant_baseline_has_undefined_rank_metrics():
    _, metrics, _ = run_training("constant", HeadSettings(), make_set(20, 0), None, make_set(10, 1))
    assert metrics["spearman"] is None and metrics["kendall"] is None and metrics["mae"] > 0


def _with(data: LabeledSet, **kw) -> LabeledSet:
    inp = HeadInput(**{**data.inputs.__dict__, **kw.pop("inputs", {})})
    return LabeledSet(inp, kw.get("y", data.y), data.n_samples, data.capped_frac)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: _with(s, y=s.y[:-1]), "targets"),
        (
            lambda s: _with(
                s, inputs={"features": np.where(np.eye(20, 8, dtype=bool), np.nan, s.inputs.features)}
            ),
            "NaN",
        ),
        (lambda s: _with(s, inputs={"features": s.inputs.features[:, :4]}), "widths differ"),
        (lambda s: _with(s, inputs={"features": None}), "needs `features`"),
    ],
)
def test_bad_train_input_fails_before_training(change, message):
    with pytest.raises(DataError, match=message):
        run_training("linear", LINEAR, change(make_set(20, 0)), None, make_set(20, 1))


def test_test_set_needs_two_distinct_lengths():
    test = make_set(10, 1)
    with pytest.raises(DataError, match="2 distinct lengths"):
        run_training("linear", LINEAR, make_set(20, 0), None, _with(test, y=np.full(10, 7.0)))


def test_config_errors_name_the_valid_choices():
    with pytest.raises(ConfigError, match="valid: .*egtp"):
        run_training("egpt", HeadSettings(), make_set(20, 0), None, make_set(10, 1))
    with pytest.raises(ConfigError, match="valid keys"):
        run_training("linear", HeadSettings(params={"alpah": 1}), make_set(20, 0), None, make_set(10, 1))
    with pytest.raises(ConfigError, match=r"head linear: unknown keys \['name'\]"):
        HeadSettings.from_mapping({"name": "linear"}, group="head linear")  # a typo never falls back silently
    with pytest.raises(TypeError, match="HeadSettings"):
        run_training("linear", {"params": {}}, make_set(20, 0), None, make_set(10, 1))


class _Features:
    """The FeatureSet surface labeled_set uses."""

    def __init__(self, ids, cols):
        self.ids, self.cols, self.names = list(ids), cols, list(cols)

    def subset(self, ids):
        idx = [self.ids.index(i) for i in ids]
        return _Features(ids, {k: v[idx] for k, v in self.cols.items()})

    def get(self, name):
        return self.cols[name]


def test_assembly_from_artefacts_and_missing_feature():
    prompts = {
        f"p{i}": {"id": f"p{i}", "domain": "qa", "messages": [{"role": "user", "content": f"q{i}"}]}
        for i in range(6)
    }
    splits = {"indomain": {"qa": {"train": ["p0", "p1", "p2"], "val": ["p3"], "test": ["p4", "p5"]}}}
    targets = target_table(pd.DataFrame({"id": ["p0", "p1", "p2", "p3", "p4"], "mean": [1.0, 2, 3, 4, 5]}))
    fs = _Features(
        prompts,
        {"hs.L1.last": np.arange(12, dtype=np.float32).reshape(6, 2), "n_prompt_tokens": np.ones((6, 1))},
    )
    ids = indomain_ids(splits)
    test = labeled_set(ids["test"], prompts, targets, features=fs, feature="hs.L1.last", split="test")
    assert test.inputs.ids == ["p4"]  # p5 has no target: dropped
    assert test.inputs.texts == ["q4"] and test.inputs.features.tolist() == [[8.0, 9.0]]
    with pytest.raises(DataError, match="not extracted"):
        labeled_set(ids["train"], prompts, targets, features=fs, feature="hs.L9.entropy", split="train")


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory):
    """A 16-prompt trace prepared by the data stage; features from the tiny model (last pooling only)."""
    from lengthpred.stages.data import prepare

    tmp = tmp_path_factory.mktemp("trace")
    rng = np.random.default_rng(0)
    with open(tmp / "trace.jsonl", "w") as f:
        for i in range(16):
            long = i % 2 == 0
            text = ("Write a long essay about " if long else "Say yes: ") + f"topic {i}"
            f.write(
                json.dumps({"prompt": text, "length": int((300 if long else 20) + rng.integers(0, 50))})
                + "\n"
            )

    def cfg_for(head: str, *extra: str):
        return compose_cfg(
            [
                "model=tiny",
                "data=trace",
                f"data.train_path={tmp / 'trace.jsonl'}",
                f"paths.data_dir={tmp / 'data'}",
                f"head={head}",
                "features.pools=[last]",
                "features.fused=[]",
                "features.token_layers=[]",  # the default stores layer 20, which the tiny model lacks
                *extra,
            ],
            tmp / f"run-{head}",
        )

    prepare(cfg_for("constant"))
    return cfg_for


@pytest.mark.parametrize(
    "head, extra",
    [
        ("linear", ["head.layer=2"]),
        ("domain_median", []),
        ("concat", ["head.layers=[1,2,4]", "head.select.use=[[2],[1,2,4]]", "head.select.alpha=[1.0]", "search.budget=4"]),
    ],
)
def test_train_stage_writes_metrics_head_and_predictions(trace_run, head, extra):
    from lengthpred.heads import load_head
    from lengthpred.stages.train import train_from_config

    cfg = trace_run(head, *extra)
    m = train_from_config(cfg, cfg.paths.output_dir)
    out = cfg.paths.output_dir
    saved = json.loads(open(f"{out}/metrics.json").read())
    for key in (
        "spearman",
        "kendall",
        "mae",
        "n_train",
        "n_test",
        "n_parameters",
        "head",
        "layer",
        "pooling",
        "n_capped",
    ):
        assert key in saved
    assert saved["n_train"] + saved["n_val"] + saved["n_test"] == 16 and saved["head"] == head
    preds = pd.read_parquet(f"{out}/predictions.parquet")
    assert len(preds) == m["n_test"] + m["n_val"] and preds["split"].str.startswith("indomain/").all()
    assert preds["split"].str.endswith("/val").sum() == m["n_val"] > 0  # val rows, for choices made on val
    assert sum(v["n"] for v in m["per_domain"].values()) == m["n_test"]  # scored on test rows only
    if head == "concat":  # three layers' last token side by side, the tiny model's d = 64 each
        assert saved["feature"] == ["hs.L1.last", "hs.L2.last", "hs.L4.last"]
        assert load_head(f"{out}/head").n_features_in_ == 3 * 64
    assert load_head(f"{out}/head").n_parameters == m["n_parameters"]
    train_from_config(cfg, out)  # a rerun replaces its rows instead of duplicating them
    assert len(pd.read_parquet(f"{out}/predictions.parquet")) == len(preds)


def test_a_resumed_train_stage_skips_a_head_it_finished_with_the_same_config(trace_run, capsys):
    from lengthpred.stages.resume import DONE
    from lengthpred.stages.train import run_train

    cfg = trace_run("domain_median")
    out = cfg.paths.output_dir
    run_train(cfg, out)
    assert json.loads(open(f"{out}/{DONE}").read())["config"]
    before = os.path.getmtime(f"{out}/metrics.json")
    capsys.readouterr()
    run_train(cfg, out)
    assert "skipped (resumed stage)" in capsys.readouterr().out and os.path.getmtime(f"{out}/metrics.json") == before
    other = trace_run("domain_median", "cross_domain=false")  # another config in the same folder: fitted again
    run_train(other, out)
    assert "skipped" not in capsys.readouterr().out and os.path.getmtime(f"{out}/metrics.json") > before


def test_train_stage_rejects_a_feature_that_was_not_extracted(trace_run):
    from lengthpred.stages.train import train_from_config

    cfg = trace_run("egtp", "head.layer=2")  # egtp reads hs.L2.entropy; only `last` was extracted
    with pytest.raises(DataError, match="not extracted"):
        train_from_config(cfg, cfg.paths.output_dir)


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO_ROOT / "conf" / "head").glob("*.yaml")))
def test_every_head_config_builds_with_every_candidate(name, tmp_path):
    """Each conf/head option composes, its params and every `select` candidate build the head, and
    `n_seeds` is only set on heads with a random_state (heads that are deterministic have no seeds)."""
    from lengthpred.heads import build_head
    from lengthpred.heads.training import _candidates
    from lengthpred.stages.heads import head_name

    cfg = compose_cfg([f"head={name}"], tmp_path)
    hcfg = OmegaConf.to_container(cfg.head, resolve=True)
    settings = HeadSettings.from_mapping(hcfg, group=f"head {name}")  # every head file's keys are settings
    for cand in _candidates(settings.select):
        head = build_head(head_name(hcfg), **(settings.params | cand))
    if int(hcfg.get("n_seeds") or 1) > 1:
        assert "random_state" in head.get_params()
    if name == "probe":  # the README's probe row is layer 20's last token, the linear readout's feature
        assert (hcfg["layer"], hcfg["pooling"]) == (20, "last")
