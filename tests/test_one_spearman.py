"""One Spearman: the simulator's trace and spec modules and the online package use `lengthpred.metrics`'
spearman and its undefined rule (fewer than 2 distinct values in either input), as NaN in their tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lengthpred.metrics import spearman_or_nan, spearman_rows
from lengthpred.sched.spec.acceptance import variability_summary


def test_spearman_or_nan_is_scipys_value_or_nan_where_undefined():
    rng = np.random.default_rng(0)
    y, p = rng.normal(size=50), rng.normal(size=50)
    assert spearman_or_nan(y, p) == pytest.approx(stats.spearmanr(y, p).statistic, abs=1e-15)
    assert spearman_or_nan([1.0, 2.0], [3.0, 1.0]) == pytest.approx(-1.0)  # two distinct values are enough
    assert math.isnan(spearman_or_nan(y, np.full(50, 3.0)))
    assert math.isnan(spearman_or_nan([1.0], [2.0]))
    assert math.isnan(spearman_or_nan([], []))  # an empty split (e.g. no validation requests)


def test_spearman_rows_matches_the_point_value_row_by_row():
    rng = np.random.default_rng(1)
    T, P = rng.normal(size=(4, 30)), rng.normal(size=(4, 30))
    P[2] = 7.0  # a constant row is undefined
    got = spearman_rows(T, P)
    want = [spearman_or_nan(t, p) for t, p in zip(T, P, strict=True)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, equal_nan=True)
    assert math.isnan(got[2]) and np.isfinite(got[[0, 1, 3]]).all()


def test_spec_variability_uses_the_shared_rule():
    """Two requests with distinct acceptance and length: defined under metrics' rule (was NaN under n > 2)."""
    stats_ = pd.DataFrame({"accept": [0.2, 0.6], "output_tokens": [10, 30], "steps": [5, 9],
                           "step_sd": [0.1, 0.2]})
    records = pd.DataFrame({"proposed": [[0, 4, 4], [0, 4, 4]], "accepted": [[0, 1, 2], [0, 3, 4]]})
    out = variability_summary(stats_, records, k=4, early_k=())
    rho = out.set_index("metric").loc["spearman_accept_length", "value"]
    assert rho == pytest.approx(1.0)
    stats_["accept"] = 0.5
    out = variability_summary(stats_, records, k=4, early_k=())
    assert math.isnan(out.set_index("metric").loc["spearman_accept_length", "value"])
