"""The within-bin comparison (lengthpred.crossmodel.within_bin): one fit per target gives the mean and both
medians, and refuses a head without bins."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.crossmodel.fits import HeadSpec
from lengthpred.crossmodel.inputs import PromptInputs
from lengthpred.crossmodel.table import LengthTable
from lengthpred.crossmodel.within_bin import compare_within_bin
from lengthpred.errors import ConfigError
from lengthpred.heads import HeadSettings, run_training
from lengthpred.stages.castillo_within_bin import within_bin_markdown

pytestmark = pytest.mark.numeric

M1 = "acme--One"
COL = "hs.L20.last"


def long_tailed_table(n: int = 500, d: int = 8):
    """log-length linear in the features plus Student-t noise, 10 samples per prompt, a maximum near 8,000."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)).astype(np.float32)
    z = np.log(200) + 0.6 * X[:, 0] + 0.5 * rng.standard_t(3, size=n)
    samples = np.clip(np.expm1(z[:, None] + 0.05 * rng.normal(size=(n, 10))), 1, 8192)[:, None, :]  # [n, 1, 10]
    ids = [f"p{i}" for i in range(n)]
    inputs = PromptInputs(ids, {COL: X}, [f"prompt {i}" for i in ids], ["A"] * n, np.full(n, 50))
    split = {"train": ids[:300], "val": ids[300:400], "test": ids[400:]}
    return inputs, LengthTable(ids, [M1], samples), split


def test_one_fit_gives_the_mean_and_both_medians_each_as_its_own_head_would():
    """The uniform median and the mean are those of a head fitted with `within_bin="uniform"`, the shaped one
    that of a head fitted with "training": training is the same under both (its effect on a long tail:
    tests/test_heads_binning.py)."""
    inputs, table, split = long_tailed_table()
    spec = HeadSpec("probe", HeadSettings(params={"epochs": 10}, n_seeds=3), COL, (M1,))
    rows = compare_within_bin(spec, inputs, table, split).set_index("part")
    assert rows.index.tolist() == ["val", "test"] and rows["n"].tolist() == [100, 100]
    assert (rows.binning == "quantile").all()
    sets = {part: inputs.labeled(table, M1, split[part], COL) for part in ("train", "val", "test")}
    for shape, col in (("uniform", "mae_median_uniform"), ("training", "mae_median_training")):
        settings = HeadSettings(params={"epochs": 10, "within_bin": shape})
        head, _, _ = run_training("probe", settings, sets["train"], sets["val"], sets["test"])
        for part in ("val", "test"):
            points = head.predict_points(sets[part].inputs.features)
            assert rows.loc[part, col] == pytest.approx(np.abs(points.median - sets[part].y).mean(), rel=1e-9)
            assert rows.loc[part, "mae_mean"] == pytest.approx(np.abs(points.mean - sets[part].y).mean(), rel=1e-9)
    assert (rows.mae_median_training != rows.mae_median_uniform).all()
    added = rows.n * (rows.mae_median_uniform - rows.mae_median_training)  # the per-prompt excess, summed
    np.testing.assert_allclose(rows.excess_all, added, rtol=1e-9, atol=1e-6)
    assert ((rows.n_last_bin >= 0) & (rows.n_last_bin <= rows.n)).all()


def test_the_summary_table_counts_fits_and_the_last_bins_share():
    rows = pd.DataFrame({"head": "probe", "fit": ["a", "b"], "part": "test", "n": [100, 100],
                         "binning": ["quantile", "uniform"], "mae_mean": [10.0, 20.0],
                         "mae_median_uniform": [14.0, 20.0], "mae_median_training": [9.0, 21.0],
                         "n_last_bin": [6, 0], "excess_last_bin": [400.0, 0.0], "excess_all": [500.0, -100.0]})
    text = within_bin_markdown(rows)
    assert "| probe | test | 2 | all | 15.0 | 17.0 | 15.0 | 1 of 2 | 6 of 200 | 100% |" in text
    assert "| probe | test | 1 | quantile | 10.0 | 14.0 | 9.0 | 1 of 1 | 6 of 100 | 80% |" in text


def test_a_head_without_bins_is_refused_in_one_line():
    inputs, table, split = long_tailed_table(60)
    with pytest.raises(ConfigError, match="not a binned head"):
        compare_within_bin(HeadSpec("linear", HeadSettings(), COL, (M1,)), inputs, table, split)
