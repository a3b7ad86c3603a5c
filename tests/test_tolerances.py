"""The float32 tolerance helper passes float32 rounding and fails a real difference, on each vector's scale."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tolerances import EPS32, assert_close_f32, f32_rel


def test_float32_rounding_of_a_long_sum_passes_and_a_real_error_fails():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 5000))
    want = np.cumsum(x, axis=-1)  # float64
    got = np.cumsum(x.astype(np.float32), axis=-1, dtype=np.float32)  # sequential float32: the worst order
    assert_close_f32(got, want, 5000)
    bad = got.copy()
    bad[2, 17] += 1e-3 * (1 + np.abs(want[2]).max())
    with pytest.raises(AssertionError, match=r"at \(2, 17\) exceeds the float32 bound"):
        assert_close_f32(bad, want, 5000)
    with pytest.raises(AssertionError, match="exceeds"):
        assert_close_f32(np.full(3, np.nan), np.zeros(3), 10)


def test_bound_grows_with_the_reduction_and_doubles_for_two_float32_results():
    assert f32_rel(100) == pytest.approx(10 * f32_rel(1)) and f32_rel(1) == pytest.approx(8 * EPS32)
    assert f32_rel(49152, both_float32=True) == pytest.approx(2 * f32_rel(49152))
    with pytest.raises(ValueError, match="at least one term"):
        f32_rel(0)
    with pytest.raises(AssertionError, match="shapes"):
        assert_close_f32(np.zeros(3), np.zeros(4), 1)
