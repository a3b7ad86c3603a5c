"""Distribution objects, censored observations and their scores, held to closed forms and calibrated data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lengthpred.distributions import (
    Empirical,
    Histogram,
    LogNormal,
    Observations,
    PointMass,
    QuantileGrid,
    check_quantiles,
    coverage,
    crps,
    crps_fair,
    from_trace,
    pinball,
    pit_histogram,
    recap,
    score_all,
    trace_cap,
    within_bin_knots,
)
from lengthpred.errors import ConfigError, DataError


@pytest.mark.parametrize("bad, match", [
    ([0.0, 0.5], "strictly inside"), ([0.5, 1.2], "strictly inside"), ([-0.1], "strictly inside"),
    ([0.9, 0.1], "strictly increasing"), ([0.5, 0.5], "strictly increasing"), ([], "non-empty"),
    ([float("nan")], "strictly inside"),
])
def test_bad_quantile_levels_are_one_line_config_errors(bad, match):
    with pytest.raises(ConfigError, match=match) as e:
        check_quantiles(bad)
    assert "\n" not in str(e.value)


def test_lognormal_quantile_inverts_cdf_and_matches_scipy():
    d = LogNormal([4.0, 5.0], [0.5, 0.8])
    q = d.quantile([0.1, 0.5, 0.9])
    np.testing.assert_allclose(d.cdf(q), np.tile([0.1, 0.5, 0.9], (2, 1)), atol=1e-12)
    ref = stats.lognorm(s=0.8, scale=np.exp(5.0)).mean() - 1
    np.testing.assert_allclose(d.mean()[1], ref, rtol=1e-12)
    # capped mean by integration vs E[min(L, C)] by Monte Carlo
    rng = np.random.default_rng(0)
    draws = np.expm1(4.0 + 0.5 * rng.normal(size=400_000))
    np.testing.assert_allclose(d.take([0]).mean(cap=100)[0], np.minimum(draws, 100).mean(), rtol=5e-3)


def test_histogram_uniform_within_bins_and_point_mass_in_zero_width_bin():
    edges = [0, 10, 20, 20]  # the last bin has zero width: a point mass at 20
    h = Histogram(edges, [[0.2, 0.3, 0.5]])
    np.testing.assert_allclose(h.cdf([[5, 10, 15, 19.9, 20]])[0], [0.1, 0.2, 0.35, 0.497, 1.0])
    np.testing.assert_allclose(h.quantile([0.1, 0.35, 0.6])[0], [5, 15, 20])


def test_quantile_grid_sorts_crossing_values_and_interpolates():
    g = QuantileGrid([0.25, 0.5, 0.75], [[30, 20, 40]])  # crossing: rearranged to 20, 30, 40
    np.testing.assert_allclose(g.values[0], [20, 30, 40])
    np.testing.assert_allclose(g.cdf([[25, 30, 35]])[0], [0.375, 0.5, 0.625])
    np.testing.assert_allclose(g.quantile([0.375])[0], [25])


def test_empirical_and_point_mass():
    e = Empirical([[3, 1, 2], [10]])
    np.testing.assert_allclose(e.cdf([1.5, 10]), [1 / 3, 1])
    np.testing.assert_allclose(e.quantile([0.5])[:, 0], [2, 10])
    np.testing.assert_allclose(PointMass([7.0]).mean(), [7.0])


def obs_of(lengths, cap, rows=None, capped=None):
    lengths = np.asarray(lengths, dtype=float)
    rows = np.arange(lengths.size) if rows is None else np.asarray(rows)
    capped = lengths >= cap if capped is None else np.asarray(capped)
    return Observations(rows, lengths, capped, float(cap))


def test_crps_of_a_point_mass_is_the_absolute_error_and_of_samples_the_closed_form():
    o = obs_of([10, 40, 3], cap=1000)
    np.testing.assert_allclose(crps(PointMass([12, 30, 3]), o), [2, 10, 0])
    rng = np.random.default_rng(1)
    samples = [rng.integers(0, 200, size=5) for _ in range(3)]
    y = np.array([50, 120, 7])
    closed = [np.abs(s - t).mean() - 0.5 * np.abs(s[:, None] - s[None, :]).mean() for s, t in zip(samples, y, strict=True)]
    np.testing.assert_allclose(crps(Empirical(samples), obs_of(y, cap=1000)), closed, atol=1e-9)


def test_a_capped_sample_is_scored_only_below_the_cap():
    """Two predictions that agree below the cap and differ above it score the same on a capped sample."""
    o = obs_of([256], cap=256)
    a, b = QuantileGrid([0.5, 0.9], [[100, 300]]), QuantileGrid([0.5, 0.9], [[100, 9000]])
    assert o.capped[0]
    np.testing.assert_allclose(pinball(a, o, [0.5, 0.9]), pinball(b, o, [0.5, 0.9]))
    # the pinball at 0.9 of min(q, C) = C against min(y, C) = C is 0; at 0.5 it is 0.5 * (256 - 100)
    np.testing.assert_allclose(pinball(a, o, [0.5, 0.9])[0], [78, 0])
    # CRPS: only the mass below the cap matters; a point mass at or beyond the cap scores 0 there
    np.testing.assert_allclose(crps(PointMass([900]), o), [0.0])
    np.testing.assert_allclose(crps(PointMass([200]), o), [56.0])


def test_coverage_and_pit_are_nominal_for_the_true_distribution_even_when_censored():
    rng = np.random.default_rng(2)
    n = 20_000
    mu, sigma = rng.normal(5, 0.5, size=n), 0.7
    L = np.floor(np.expm1(mu + sigma * rng.normal(size=n)))
    cap = 256
    o = obs_of(np.minimum(L, cap), cap, capped=L >= cap)
    assert 0.2 < o.capped_frac < 0.5
    true = LogNormal(mu, sigma)
    for level in (0.5, 0.8):
        cov, decided = coverage(true, o, level)
        assert abs(cov.mean() - level) < 0.015
        assert 0 <= decided <= 1
    hist = pit_histogram(true, o)
    np.testing.assert_allclose(hist, 0.1, atol=0.01)
    # a too-narrow prediction under-covers
    cov_narrow, _ = coverage(LogNormal(mu, 0.3), o, 0.8)
    assert cov_narrow.mean() < 0.6


def test_score_all_per_sample_ceiling_and_intervals():
    o = obs_of([10, 20, 30, 40], cap=100, rows=[0, 0, 1, 1])
    loo = Empirical([[20], [10], [40], [30]])  # each sample predicted by its prompt's other sample
    s = score_all(loo, o, per_sample=True, n_boot=200)
    assert s["crps"].value == pytest.approx(10.0)
    assert s["crps"].low <= s["crps"].value <= s["crps"].high
    with pytest.raises(ValueError, match="per_sample"):
        score_all(Empirical([[1]]), o, per_sample=True)


def test_from_trace_reads_the_cap_and_refuses_a_trace_without_one():
    rows = pd.DataFrame({"id": ["a", "a", "b"], "sample": [0, 1, 0], "length": [512, 30, 7],
                         "finish_reason": ["length", "eos", "eos"]})
    meta = {"settings": {"max_new_tokens": 512}}
    o = from_trace(rows, meta, ["b", "a"])
    assert o.cap == 512 and o.row.tolist() == [0, 1, 1] and o.capped.tolist() == [False, True, False]
    with pytest.raises(DataError, match="records no cap") as e:
        trace_cap({"settings": {}}, "bench.jsonl")
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="no samples"):
        from_trace(rows, meta, ["zz"])
    r = recap(o, 20)
    assert r.cap == 20 and r.capped.tolist() == [False, True, True] and r.length.max() == 20
    with pytest.raises(DataError, match="cannot re-cap"):
        recap(o, 1024)


def test_fair_crps_is_unbiased_for_the_members_distribution():
    """With 2 members per ensemble the plain ensemble CRPS is biased up; the fair one matches the CRPS of the
    distribution the members come from (here a known log-normal, by the grid)."""
    rng = np.random.default_rng(3)
    n, cap = 4000, 400
    mu = np.full(n, 4.5)
    draw = lambda: np.minimum(np.floor(np.expm1(mu + 0.5 * rng.normal(size=n))), cap)  # noqa: E731
    y, a, b = draw(), draw(), draw()
    o = obs_of(y, cap)
    truth = crps(LogNormal(mu, 0.5), o).mean()
    fair = crps_fair([np.array([p, q]) for p, q in zip(a, b, strict=True)], o).mean()
    plain = crps(Empirical([[p, q] for p, q in zip(a, b, strict=True)]), o).mean()
    assert abs(fair - truth) < 0.03 * truth
    assert plain > truth * 1.15
    with pytest.raises(ValueError, match="at least 2"):
        crps_fair([np.array([1.0])], obs_of([1.0], cap))


def test_histogram_with_knots_follows_each_bins_training_lengths():
    edges = np.array([0.0, 10.0, 1000.0])
    y_train = np.array([2, 4, 6, 8, 11, 12, 13, 14, 15, 990.0])  # the wide bin's lengths crowd its lower edge
    knots = within_bin_knots(y_train, edges, n_segments=4)
    np.testing.assert_allclose(knots[:, [0, -1]], [[0, 10], [10, 1000]])  # the bins' edges are kept
    assert np.all(np.diff(knots, axis=1) >= 0) and knots[1, 2] < 20  # the wide bin's median length is ~13
    probs = [[0.2, 0.8], [0.9, 0.1]]
    h, flat = Histogram(edges, probs, knots), Histogram(edges, probs)
    assert h.quantile([0.5])[0, 0] < 20 < flat.quantile([0.5])[0, 0]  # uniform: ~380 tokens
    q = np.array([0.05, 0.3, 0.5, 0.7, 0.95])
    np.testing.assert_allclose(h.cdf(h.quantile(q)), np.tile(q, (2, 1)), atol=1e-9)  # cdf inverts quantile
    np.testing.assert_allclose(h.mean(), h.mean(cap=1000), rtol=1e-3)  # the closed form and the integral agree
    np.testing.assert_allclose(Histogram(edges, probs, within_bin_knots([], edges)).quantile(q), flat.quantile(q))
    np.testing.assert_allclose(h.take([1]).knots, knots)
