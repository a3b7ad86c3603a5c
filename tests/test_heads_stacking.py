"""The stacked ensemble: its weight is chosen on val (never test), a head stacked with itself is that head,
and the stack stage reads two trained heads' val and test rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.heads.stacking import fit_stack, predict_stack
from lengthpred.heads.training import PREDICTION_COLUMNS
from tests.conftest import compose_cfg


def _lengths(signal: np.ndarray) -> np.ndarray:
    return np.round(np.expm1(4 + 0.8 * signal))


def test_a_head_stacked_with_itself_is_that_head():
    rng = np.random.default_rng(0)
    y, a = _lengths(rng.normal(size=50)), _lengths(rng.normal(size=50))
    stack = fit_stack(y, a, a)
    np.testing.assert_allclose(predict_stack(stack, a, a), a, rtol=1e-12)


def test_the_weight_is_chosen_on_val_not_test():
    """On val head a ranks and head b is noise; on test it is the other way round: val decides (a alone)."""
    rng = np.random.default_rng(1)
    s_val, s_test = rng.normal(size=80), rng.normal(size=80)
    y_val, y_test = _lengths(s_val), _lengths(s_test)
    a_val, b_val = _lengths(s_val + 0.1 * rng.normal(size=80)), _lengths(rng.normal(size=80))
    a_test, b_test = _lengths(rng.normal(size=80)), _lengths(s_test)
    stack = fit_stack(y_val, a_val, b_val)
    assert stack.weight == 1.0 and stack.coef_a == pytest.approx(1.0)
    np.testing.assert_allclose(predict_stack(stack, a_test, b_test), a_test)
    assert dict(stack.grid)[1.0] == stack.val_spearman > dict(stack.grid)[0.0] + 0.5
    assert fit_stack(y_test, a_test, b_test).weight == 0.0  # what choosing on test would have taken


def test_two_noisy_views_stack_better_than_either_and_the_spread_does_not_matter():
    rng = np.random.default_rng(2)
    s = rng.normal(size=400)
    y, a, b = _lengths(s), _lengths(s + rng.normal(size=400)), _lengths(s + rng.normal(size=400))
    stack = fit_stack(y, a, b)
    ends = dict(stack.grid)
    assert 0.2 < stack.weight < 0.8 and stack.val_spearman > max(ends[0.0], ends[1.0]) + 0.05
    shrunk = np.expm1(0.1 * np.log1p(b))  # b's log predictions with a tenth of the spread
    again = fit_stack(y, a, shrunk)
    assert again.weight == stack.weight
    assert np.array_equal(np.argsort(predict_stack(again, a, shrunk)), np.argsort(predict_stack(stack, a, b)))


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(DataError, match="same >= 2 val prompts"):
        fit_stack(np.ones(3), np.ones(3), np.ones(2))
    with pytest.raises(DataError, match="n_weights"):
        fit_stack(np.arange(3.0), np.arange(3.0), np.arange(3.0), n_weights=1)


def _rows(head: str, y: np.ndarray, pred: np.ndarray, part: str) -> pd.DataFrame:
    n = len(y)
    return pd.DataFrame(
        {
            "head": head,
            "split": [f"indomain/{d}/{part}" for d in ["math", "chat"] * (n // 2)],
            "id": [f"{part}{i}" for i in range(n)],
            "domain": ["math", "chat"] * (n // 2),
            "y_true": y,
            "y_pred": pred,
            "n_samples": 4,
            "capped_frac": 0.0,
        },
        columns=PREDICTION_COLUMNS,
    )


def test_stack_stage_writes_the_stack_of_two_runs(tmp_path):
    from lengthpred.stages.stack import stack_from_config

    rng = np.random.default_rng(3)
    sv, st = rng.normal(size=60), rng.normal(size=40)
    yv, yt = _lengths(sv), _lengths(st)
    runs = {
        "linear": (_lengths(sv + 0.1 * rng.normal(size=60)), _lengths(rng.normal(size=40))),
        "proxy_reg": (_lengths(rng.normal(size=60)), _lengths(st)),
    }
    for head, (pv, pt) in runs.items():
        (tmp_path / "exp" / head).mkdir(parents=True)
        frame = pd.concat([_rows(head, yv, pv, "val"), _rows(head, yt, pt, "test")])
        frame.to_parquet(tmp_path / "exp" / head / "predictions.parquet")
        (tmp_path / "exp" / head / "metrics.json").write_text(json.dumps({"head": head, "n_parameters": 10}))
    cfg = compose_cfg([f"stack.input_dir={tmp_path / 'exp'}"], tmp_path / "exp" / "stack")
    m = stack_from_config(cfg, cfg.paths.output_dir)
    assert (m["head"], m["weight"], m["n_val"], m["n_test"], m["n_parameters"]) == (
        "stack_linear_proxy_reg",
        1.0,
        60,
        40,
        21,
    )
    out = pd.read_parquet(tmp_path / "exp" / "stack" / "predictions.parquet")
    test = out[out["split"].str.endswith("/test")].set_index("id").loc[[f"test{i}" for i in range(40)]]
    np.testing.assert_allclose(
        test["y_pred"], runs["linear"][1]
    )  # val chose linear; test would have chosen proxy
    m_again = stack_from_config(cfg, cfg.paths.output_dir)  # its own output is not read as an input
    assert m_again["weight"] == 1.0

    # a third head that ranks val perfectly and test not at all: among candidate partners, val picks it
    (tmp_path / "exp" / "proxy_cls").mkdir()
    frame = pd.concat(
        [_rows("proxy_cls", yv, yv, "val"), _rows("proxy_cls", yt, _lengths(rng.normal(size=40)), "test")]
    )
    frame.to_parquet(tmp_path / "exp" / "proxy_cls" / "predictions.parquet")
    pick = compose_cfg(
        [f"stack.input_dir={tmp_path / 'exp'}", "stack.heads=[linear,[proxy_reg,proxy_cls]]"], tmp_path / "s3"
    )
    m = stack_from_config(pick, pick.paths.output_dir)
    assert m["head"] == "stack_linear" and m["heads"] == ["linear", "proxy_cls"] and m["n_parameters"] is None
    scores = m["partners_val_spearman"]
    assert scores["proxy_cls"] == pytest.approx(1.0) and scores["proxy_reg"] < 0.99

    bad = compose_cfg([f"stack.input_dir={tmp_path / 'exp'}", "stack.heads=[linear,egtp]"], tmp_path / "s2")
    with pytest.raises(DataError, match="no predictions of head 'egtp' with val rows"):
        stack_from_config(bad, bad.paths.output_dir)
