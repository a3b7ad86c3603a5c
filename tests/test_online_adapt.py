"""The adapt stage end to end on injected synthetic inputs (no model): config, outputs, predictions file."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError
from lengthpred.eval.predictions import read_predictions
from lengthpred.online.config import build_heads
from lengthpred.online.experiment import run_adaptation
from tests.conftest import compose_cfg


class _Features:
    def __init__(self, ids, X):
        self.ids, self._X = ids, X

    def get(self, name):
        assert name == "hs.L20.last"
        return self._X


def _synthetic(d: int = 12, seed: int = 0):
    """Three domains; b is a small shift from a, c a large one (different planted weights)."""
    rng = np.random.default_rng(seed)
    w = {"a": rng.normal(size=d) / np.sqrt(d)}
    w["b"] = w["a"] + 0.2 * rng.normal(size=d) / np.sqrt(d)
    w["c"] = rng.normal(size=d) / np.sqrt(d)
    ids, X, rows, indomain = [], [], [], {}
    for dom, n in (("a", 120), ("b", 90), ("c", 90)):
        Xd = rng.normal(size=(n, d)) + (1.0 if dom == "c" else 0.0)
        y = np.expm1(4 + 0.5 * Xd @ w[dom] + 0.1 * rng.normal(size=n))
        dids = [f"{dom}{i:04d}" for i in range(n)]
        ids += dids
        X.append(Xd)
        rows += [
            {"id": i, "y": v, "n_samples": 2, "capped_frac": 0.0, "domain": dom}
            for i, v in zip(dids, y, strict=True)
        ]
        indomain[dom] = {
            "train": dids[: n // 2],
            "val": dids[n // 2 : 3 * n // 4],
            "test": dids[3 * n // 4 :],
        }
    cross = [
        {
            "name": f"a->{t}",
            "source": "a",
            "target": t,
            "train": indomain["a"]["train"],
            "val": [],
            "test": indomain[t]["test"],
            "shift": {"length_wasserstein": s},
        }
        for t, s in (("b", 0.1), ("c", 1.5))
    ]
    return {"indomain": indomain, "cross": cross}, _Features(ids, np.vstack(X)), pd.DataFrame(rows)


@pytest.mark.parametrize("option", ["rls", "sweep"])
def test_online_options_compose_and_build(option, tmp_path):
    cfg = compose_cfg([f"online={option}"], tmp_path)
    heads = build_heads(cfg.online, 1.0)
    assert {"static", "sgd", "window", "oracle_refit", "indomain", "rls@1", "rls@0.99"} <= set(heads)
    assert heads["indomain"].fit_on == "stream" and not heads["static"].update


def test_lambda_out_of_range_fails_before_work(tmp_path):
    cfg = compose_cfg(["online.forgetting=[1.0,1.2]"], tmp_path)
    with pytest.raises(ConfigError, match=r"\(0, 1\]"):
        run_adaptation(cfg, tmp_path)  # no inputs passed: must fail before loading any


def test_run_adaptation_writes_curves_gains_and_predictions(tmp_path):
    splits, fs, targets = _synthetic()
    cfg = compose_cfg(["online.alpha=1.0", "online.record_every=10"], tmp_path)
    res = run_adaptation(cfg, tmp_path, splits=splits, feature_set=fs, targets=targets)
    assert res["n_pairs"] == 2
    for f in (
        "curves.csv",
        "summary.csv",
        "gains.csv",
        "adapt.json",
        "plots/gain_vs_shift.png",
        "plots/curves_a_to_b.png",
        "plots/curves_a_to_c.png",
    ):
        assert (tmp_path / f).is_file(), f
    preds = read_predictions(tmp_path / "predictions.parquet")
    assert set(preds["split"]) == {
        "cross/a->b/test",
        "cross/a->b/stream",
        "cross/a->c/test",
        "cross/a->c/stream",
    }
    assert {"rls@0.999", "static", "sgd", "window", "oracle_refit", "indomain"} <= set(preds["head"])
    assert (preds["n_samples"] == 2).all()
    gains = pd.read_csv(tmp_path / "gains.csv").set_index(["pair", "head"])
    # RLS helps much more under the large shift than under the small one
    big, small = gains.loc[("a->c", "rls@0.99")], gains.loc[("a->b", "rls@0.99")]
    assert (
        big["stream_spearman_delta"] > 0.3 and big["stream_spearman_delta"] > small["stream_spearman_delta"]
    )
    meta = json.loads((tmp_path / "adapt.json").read_text())
    assert meta["config"]["forgetting"] == [1.0, 0.999, 0.99]


def test_every_online_option_builds_its_completion_model(tmp_path):
    from lengthpred.online.config import build_completion

    for option in ("serving", "instant", "simulated"):
        comp = build_completion(compose_cfg([f"online/completion={option}"], tmp_path).online)
        arr, done = comp.schedule(np.array([30.0, 5.0, 60.0]))
        assert (done[np.isfinite(done)] >= arr[np.isfinite(done)]).all()


def test_tracker_gets_tables_images_and_headline(tmp_path):
    class _Rec:
        def __init__(self):
            self.tables, self.images, self.summ = [], [], {}

        def log_table(self, key, columns, rows):
            self.tables.append((key, len(rows)))

        def log_image(self, key, path):
            self.images.append(key)

        def summary(self, values):
            self.summ.update(values)

    splits, fs, targets = _synthetic(seed=1)
    rec = _Rec()
    cfg = compose_cfg(["online.alpha=1.0", "online.forgetting=[0.99]", "online.record_every=20"], tmp_path)
    run_adaptation(cfg, tmp_path, splits=splits, feature_set=fs, targets=targets, tracker=rec)
    assert {k for k, _ in rec.tables} == {"online/summary", "online/gains", "online/curves"}
    assert "online/gain_vs_shift" in rec.images and rec.summ["best_rls"] == "rls@0.99"
