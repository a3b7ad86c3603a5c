"""Median and mean predictions (issue 25 item 4): every head gives both, predictions.parquet carries them,
and the scorer puts MAE on the median, `mae_mean` on the mean, rank metrics on `y_pred`."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from lengthpred.distributions import Histogram
from lengthpred.eval.predictions import read_predictions
from lengthpred.eval.results import Provenance, score_predictions
from lengthpred.heads import (
    HEADS,
    BaseHead,
    HeadInput,
    HeadSettings,
    LabeledSet,
    build_head,
    load_head,
    run_training,
)
from lengthpred.heads.base import NoPointError, Points
from lengthpred.heads.training import frame_points, predictions_frame, score

PROV = Provenance("synth", "m", "synth", "0" * 12)
FAST = {"epochs": 2, "hidden": 8}  # torch heads: a couple of passes are enough to have fitted state


def skewed(n: int, seed: int, d: int = 6, sigma: float = 1.2) -> tuple[np.ndarray, np.ndarray]:
    """Lengths log-normal around a linear signal with a wide spread: the mean sits far above the median."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.round(np.expm1(5.0 + 0.5 * X[:, 0] + sigma * rng.normal(size=n)))


def labeled(X: np.ndarray, y: np.ndarray, tag: str) -> LabeledSet:
    n = len(y)
    inp = HeadInput(
        ids=[f"{tag}{i}" for i in range(n)],
        features=X,
        domains=["a", "b"] * (n // 2) + ["a"] * (n % 2),
        n_prompt_tokens=np.abs(X[:, 0]) * 50 + 10,
        tokens=[np.column_stack([np.tile(x, (3, 1)), np.arange(3.0), np.ones(3)]) for x in X],
    )
    return LabeledSet(inp, y)


def test_median_beats_the_smeared_mean_on_mae_of_a_skewed_target():
    """The point MAE rewards: on log-normal lengths with σ = 1.2 the smeared mean (what `predict` gives
    by default) has a higher MAE than expm1 of the log prediction, while the ranking is the same."""
    X, y = skewed(400, 0)
    Xt, yt = skewed(400, 1)
    head = build_head("linear", alpha=1.0).fit(X, y)
    p = head.predict_points(Xt)
    np.testing.assert_array_equal(p.pred, head.predict(Xt))  # back_transform="mean": predict is the mean
    assert head.mean_smearing_ > 1.5
    mae_median, mae_mean = np.abs(p.median - yt).mean(), np.abs(p.mean - yt).mean()
    assert mae_median < 0.9 * mae_mean
    assert spearmanr(p.median, yt).statistic == pytest.approx(spearmanr(p.mean, yt).statistic)
    # run_training reports both, MAE on the median
    _, metrics, preds = run_training("linear", HeadSettings(params={"alpha": 1.0}), labeled(X, y, "tr"), None,
                                     labeled(Xt, yt, "te"), split="indomain/all/test")
    assert metrics["mae"] == pytest.approx(mae_median) and metrics["mae_mean"] == pytest.approx(mae_mean)
    np.testing.assert_allclose(preds["y_pred_median"], p.median)
    np.testing.assert_allclose(preds["y_pred_mean"], p.mean)


def test_median_back_transform_still_knows_its_mean(tmp_path):
    X, y = skewed(200, 2)
    med = build_head("linear", alpha=1.0, back_transform="median").fit(X, y)
    mean = build_head("linear", alpha=1.0).fit(X, y)
    np.testing.assert_allclose(med.predict(X), med.predict_median(X))
    np.testing.assert_allclose(med.predict_mean(X), mean.predict(X))  # the same S, whichever is configured
    loaded = load_head(med.save(tmp_path / "h"))
    np.testing.assert_allclose(loaded.predict_mean(X), med.predict_mean(X))


def test_a_median_head_saved_without_its_smearing_factor_has_no_mean(tmp_path):
    import json

    X, y = skewed(100, 3)
    path = build_head("linear", alpha=1.0, back_transform="median").fit(X, y).save(tmp_path / "h")
    doc = json.loads((path / "head.json").read_text())
    del doc["meta"]["mean_smearing"]  # as saved before this column existed: it stored S = 1
    (path / "head.json").write_text(json.dumps(doc))
    old = load_head(path)
    assert old.predict_points(X).mean is None
    with pytest.raises(NoPointError, match="no calibrated mean"):
        old.predict_mean(X)
    with pytest.raises(ValueError, match="point kind"):
        old.predict_point(X, "mode")


def test_every_registered_head_implements_points():
    missing = [n for n in HEADS.names() if HEADS.get(n).predict_points is BaseHead.predict_points]
    assert not missing


@pytest.mark.parametrize(
    "name, params",
    [
        ("constant", {}),
        ("domain_median", {}),
        ("prompt_len", {}),
        ("linear", {"alpha": 1.0}),
        ("quantile_linear", {"alpha": 1.0}),
        ("censored_lognormal", {"alpha": 1.0}),
        ("egtp", FAST),
        ("probe", FAST),
        ("estp_learned", {**FAST, "n_bins": 5}),
    ],
)
def test_each_head_writes_both_point_columns(name, params):
    """Proxy heads: tests/test_heads_proxy.py (they need the tiny encoder)."""
    X, y = skewed(60, 4)
    train, test = labeled(X, y, "tr"), labeled(*skewed(20, 5), "te")
    kind = HEADS.get(name).input_kind
    head = build_head(name, **params).fit(train.inputs.x_for(kind), train.y)
    points = head.predict_points(test.inputs.x_for(kind))
    np.testing.assert_allclose(points.pred, head.predict(test.inputs.x_for(kind)))
    frame = predictions_frame(name, "indomain/all/test", test, points)
    for col in ("y_pred_median", "y_pred_mean"):
        assert col in frame and np.isfinite(frame[col]).all(), col
    if name in ("constant", "domain_median", "quantile_linear"):  # heads that predict their median
        np.testing.assert_allclose(frame["y_pred_median"], frame["y_pred"])


def test_binned_points_are_the_bins_expectation_and_median():
    X, y = skewed(80, 6)
    head = build_head("egtp", **FAST).fit(X, y)
    p = head.predict_points(X)
    bins = head.predict_bins(X)
    np.testing.assert_allclose(p.mean, head.predict(X))  # decode="expected"
    np.testing.assert_allclose(p.median, Histogram(head.bin_edges_, bins).quantile([0.5])[:, 0])
    argmax = build_head("egtp", **FAST, decode="argmax").fit(X, y)
    np.testing.assert_allclose(argmax.predict_points(X).mean, p.mean)  # the decode changes `pred` only
    assert not np.allclose(argmax.predict(X), p.mean)


def test_baselines_predict_medians_and_know_their_means(tmp_path):
    ids = np.arange(6).reshape(-1, 1)
    y = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 90.0])
    const = build_head("constant").fit(ids, y)
    p = const.predict_points(ids)
    assert p.median[0] == 6.5 and p.mean[0] == pytest.approx(21.0) and const.n_parameters == 1
    dom = np.array([["a"], ["a"], ["a"], ["b"], ["b"], ["b"]], dtype=object)
    dm = build_head("domain_median").fit(dom, y)
    p = dm.predict_points(np.array([["a"], ["b"], ["c"]], dtype=object))
    np.testing.assert_allclose(p.median, [2.0, 20.0, 6.5])
    np.testing.assert_allclose(p.mean, [2.0, 40.0, 21.0])
    np.testing.assert_allclose(load_head(dm.save(tmp_path / "d")).predict_points(dom).mean, dm.predict_points(dom).mean)


def _frame(n: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = np.expm1(4 + rng.normal(size=n))
    return pd.DataFrame(
        {
            "head": "h",
            "split": "indomain/all/test",
            "id": [f"p{i}" for i in range(n)],
            "domain": "a",
            "y_true": y,
            "y_pred": rng.permutation(y),  # ranks nothing
            "n_samples": 1,
            "capped_frac": 0.0,
            "y_pred_median": y * 0.9,  # ranks perfectly, small errors
            "y_pred_mean": y * 2.0,
        }
    )


def _metric(res: pd.DataFrame, name: str) -> float | None:
    rows = res[res["metric"] == name]
    return None if rows.empty else rows["value"].iloc[0]


def test_scorer_reads_the_point_each_metric_rewards(tmp_path):
    df = _frame()
    df.to_parquet(tmp_path / "predictions.parquet")
    res = score_predictions(read_predictions(tmp_path / "predictions.parquet"), PROV, n_boot=20)
    y = df["y_true"]
    assert _metric(res, "mae") == pytest.approx(np.abs(df["y_pred_median"] - y).mean())
    assert _metric(res, "mae_mean") == pytest.approx(np.abs(df["y_pred_mean"] - y).mean())
    assert _metric(res, "rmse") == pytest.approx(np.sqrt(((df["y_pred_mean"] - y) ** 2).mean()))
    assert _metric(res, "spearman") == pytest.approx(spearmanr(df["y_pred"], y).statistic)  # not the median's 1.0
    assert _metric(res, "median_ae") == pytest.approx(np.median(np.abs(df["y_pred"] - y)))


def test_old_predictions_files_without_point_columns_still_score(tmp_path):
    df = _frame().drop(columns=["y_pred_median", "y_pred_mean"])
    df.to_parquet(tmp_path / "predictions.parquet")
    res = score_predictions(read_predictions(tmp_path / "predictions.parquet"), PROV, n_boot=20)
    assert _metric(res, "mae") == pytest.approx(np.abs(df["y_pred"] - df["y_true"]).mean())
    assert _metric(res, "mae_mean") is None  # no mean recorded: no row
    assert isinstance(frame_points(df), np.ndarray)


def test_a_head_without_a_mean_gets_no_mae_mean_row(tmp_path):
    df = _frame().assign(y_pred_mean=np.nan)  # proxy_rank: no calibrated mean
    df.to_parquet(tmp_path / "predictions.parquet")
    res = score_predictions(read_predictions(tmp_path / "predictions.parquet"), PROV, n_boot=20)
    assert _metric(res, "mae_mean") is None
    assert _metric(res, "mae") == pytest.approx(np.abs(df["y_pred_median"] - df["y_true"]).mean())
    assert _metric(res, "rmse") == pytest.approx(np.sqrt(((df["y_pred"] - df["y_true"]) ** 2).mean()))
    p = frame_points(df)
    assert p.mean is None and score(df["y_true"], p)["mae_mean"] is None


def test_infinite_point_predictions_are_refused(tmp_path):
    from lengthpred.errors import DataError

    _frame().assign(y_pred_mean=np.inf).to_parquet(tmp_path / "predictions.parquet")
    with pytest.raises(DataError, match="infinite y_pred_mean"):
        read_predictions(tmp_path / "predictions.parquet")


def test_seed_columns_carry_points_and_the_seed_mae_reads_the_median():
    X, y = skewed(60, 7)
    Xt, yt = skewed(30, 8)
    cfg = HeadSettings(params=FAST, n_seeds=2)
    _, metrics, preds = run_training("egtp", cfg, labeled(X, y, "tr"), None, labeled(Xt, yt, "te"),
                                     split="indomain/all/test", n_seeds=2)
    for col in ("y_pred_median_seed0", "y_pred_median_seed1", "y_pred_mean_seed0", "y_pred_mean_seed1"):
        assert col in preds
    np.testing.assert_allclose(preds["y_pred_median_seed0"], preds["y_pred_median"])
    res = score_predictions(preds.assign(y_pred_median_seed1=preds["y_pred_mean_seed1"]), PROV, n_boot=0)
    want = np.mean([np.abs(preds["y_pred_median"] - yt).mean(), np.abs(preds["y_pred_mean_seed1"] - yt).mean()])
    assert _metric(res, "mae_seed_mean") == pytest.approx(want)
    assert metrics["mae"] == pytest.approx(np.abs(preds["y_pred_median"] - yt).mean())


def test_points_reject_a_bad_kind():
    p = Points(np.ones(2), np.ones(2), None)
    assert p.get("mean") is None
    with pytest.raises(ValueError, match="point kind"):
        p.get("mode")
