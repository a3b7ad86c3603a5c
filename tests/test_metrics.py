"""Metrics against scipy/sklearn, the undefined sentinel, bootstrap CIs, paired bootstrap, noise ceiling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from lengthpred.errors import ConfigError, DataError
from lengthpred.metrics import (
    METRICS,
    UNDEFINED,
    evaluate,
    is_undefined,
    noise_ceiling,
    paired_bootstrap,
    paired_bootstrap_seeds,
    spearman,
)


@pytest.fixture
def pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    t = np.round(rng.gamma(2.0, 120.0, 300))  # integer tokens: ties included
    return t, np.round(t + rng.normal(0, 90, 300))


def test_metrics_match_scipy_and_sklearn(pair):
    t, p = pair
    ref = {
        "spearman": stats.spearmanr(t, p).statistic,
        "kendall": stats.kendalltau(t, p, variant="b").statistic,
        "pearson": stats.pearsonr(t, p).statistic,
        "mae": skm.mean_absolute_error(t, p),
        "rmse": math.sqrt(skm.mean_squared_error(t, p)),
        "median_ae": skm.median_absolute_error(t, p),
        "within_50": np.mean(np.abs(t - p) <= 50),
        "within_100": np.mean(np.abs(t - p) <= 100),
    }
    for name, want in ref.items():
        assert METRICS.get(name)(t, p) == pytest.approx(want, rel=1e-12), name
    edges = [100, 300]
    want = np.mean(np.digitize(t, edges) == np.digitize(p, edges))
    assert METRICS.get("bucket_accuracy")(t, p, edges=edges) == pytest.approx(want)
    assert METRICS.get("bucket_accuracy")(t, p, edges=[1e9]) == 1.0  # one bucket: everything agrees


def test_vectorised_rows_equal_point_estimates(pair):
    t, p = pair
    rng = np.random.default_rng(2)
    idx = rng.integers(0, t.size, size=(7, 120))
    T, P = t[idx], p[idx]
    for name in METRICS:
        m = METRICS.get(name)
        want = [m(a, b) for a, b in zip(T, P, strict=True)]
        np.testing.assert_allclose(m.on_rows(T, P), want, rtol=1e-10, err_msg=name)


def test_direction_flags():
    assert METRICS.get("spearman").higher_is_better and METRICS.get("within_50").higher_is_better
    assert not METRICS.get("mae").higher_is_better and not METRICS.get("rmse").higher_is_better


def test_constant_predictor_is_undefined_not_zero_or_nan(pair):
    t, _ = pair
    res = evaluate(t, np.full(t.size, 250.0), n_boot=200, seed=0)
    for name in ("spearman", "kendall", "pearson"):
        e = res[name]
        assert e.value is UNDEFINED and e.ci_low is UNDEFINED and e.ci_high is UNDEFINED, name
        assert not isinstance(e.value, float)
    assert isinstance(res["mae"].value, float) and isinstance(res["mae"].ci_low, float)  # errors stay defined
    assert str(UNDEFINED) == "undefined" and not UNDEFINED and is_undefined(UNDEFINED)
    assert METRICS.get("spearman")([1.0], [2.0]) is UNDEFINED  # one value: fewer than 2 distinct


def test_bootstrap_ci_covers_point_and_shrinks_with_n():
    rng = np.random.default_rng(3)
    widths = []
    for n in (100, 1600):
        t = rng.gamma(2.0, 100.0, n)
        p = t + rng.normal(0, 80, n)
        res = evaluate(t, p, ["spearman", "mae", "within_100"], n_boot=400, seed=0)
        for e in res.values():
            assert e.ci_low <= e.value <= e.ci_high, e
        widths.append(res["spearman"].ci_high - res["spearman"].ci_low)
    assert widths[1] < 0.5 * widths[0]  # ~1/sqrt(n): 4x narrower expected


def test_bootstrap_is_seeded(pair):
    t, p = pair
    a = evaluate(t, p, ["spearman"], n_boot=300, seed=5)["spearman"]
    b = evaluate(t, p, ["spearman"], n_boot=300, seed=5)["spearman"]
    c = evaluate(t, p, ["spearman"], n_boot=300, seed=6)["spearman"]
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high) != (c.ci_low, c.ci_high)


def test_paired_bootstrap_finds_the_planted_better_predictor():
    rng = np.random.default_rng(4)
    t = rng.gamma(2.0, 100.0, 400)
    good, bad = t + rng.normal(0, 40, 400), t + rng.normal(0, 150, 400)
    d = paired_bootstrap(t, good, bad, "spearman", n_boot=500, seed=0)
    assert d.diff > 0 and d.ci_low > 0 and d.p_value < 0.05
    rev = paired_bootstrap(t, bad, good, "spearman", n_boot=500, seed=0)
    assert rev.diff < 0 and rev.ci_high < 0 and rev.p_value > 0.95
    mae = paired_bootstrap(
        t, good, bad, "mae", n_boot=500, seed=0
    )  # lower is better: A better means diff < 0
    assert mae.diff < 0 and mae.ci_high < 0 and mae.p_value < 0.05
    const = paired_bootstrap(t, np.ones_like(t), bad, "spearman", n_boot=50)
    assert const.diff is UNDEFINED and const.p_value is UNDEFINED


def test_paired_bootstrap_over_seeds_compares_seed_means_on_shared_resamples():
    rng = np.random.default_rng(5)
    t = rng.gamma(2.0, 100.0, 300)
    goods = [t + rng.normal(0, 40, 300) for _ in range(3)]
    bads = [t + rng.normal(0, 150, 300) for _ in range(2)]
    d = paired_bootstrap_seeds(t, goods, bads, "spearman", n_boot=400, seed=1)
    want = np.mean([spearman(t, g) for g in goods]) - np.mean([spearman(t, b) for b in bads])
    assert d.diff == pytest.approx(want, abs=1e-12) and 0 < d.ci_low < d.diff < d.ci_high and d.p_value < 0.05
    one = paired_bootstrap_seeds(t, goods[:1], bads[:1], "mae", n_boot=400, seed=1)
    assert one == paired_bootstrap(t, goods[0], bads[0], "mae", n_boot=400, seed=1)
    # averaging seeds narrows the interval against one seed of the same head
    assert d.ci_high - d.ci_low < paired_bootstrap(t, goods[0], bads[0], n_boot=400, seed=1).ci_high - \
        paired_bootstrap(t, goods[0], bads[0], n_boot=400, seed=1).ci_low
    with pytest.raises(ValueError, match="at least one seed"):
        paired_bootstrap_seeds(t, [], bads)


def _spearman_of_normal(rho: float) -> float:
    """Spearman correlation of a bivariate normal with Pearson rho."""
    return 6.0 / math.pi * math.asin(rho / 2.0)


def test_noise_ceiling_recovers_theory_on_simulated_lengths():
    rng = np.random.default_rng(5)
    n, k, reliability = 4000, 4, 0.5  # one sample = latent + noise, var(latent)/var(sample) = 0.5
    mu = rng.normal(0, 1, n)
    samples = mu[:, None] + rng.normal(0, math.sqrt(1 / reliability - 1), (n, k))
    nc = noise_ceiling(samples, seed=0)
    mean_k_rel = k * reliability / (1 + (k - 1) * reliability)
    assert nc.pairwise_r == pytest.approx(_spearman_of_normal(reliability), abs=0.02)
    # a perfect predictor of the expected length (mu itself) scores the ceiling
    truth_single = stats.spearmanr(mu, samples[:, 0]).statistic
    truth_mean = stats.spearmanr(mu, samples.mean(axis=1)).statistic
    assert nc.ceiling_single == pytest.approx(truth_single, abs=0.03)
    assert nc.ceiling_mean_k == pytest.approx(truth_mean, abs=0.03)
    assert nc.ceiling_mean_k == pytest.approx(_spearman_of_normal(math.sqrt(mean_k_rel)), abs=0.02)
    assert nc.split_half_single == pytest.approx(truth_single, abs=0.03)
    assert nc.split_half_mean_k == pytest.approx(truth_mean, abs=0.03)
    # leave-one-out: one sample vs the mean of the other k-1
    rel_rest = (k - 1) * reliability / (1 + (k - 2) * reliability)
    assert nc.loo == pytest.approx(_spearman_of_normal(math.sqrt(reliability * rel_rest)), abs=0.02)


def test_noise_ceiling_ragged_and_degenerate():
    rng = np.random.default_rng(6)
    mu = rng.normal(5, 1, 300)
    ragged = [list(m + rng.normal(0, 0.5, 2 + i % 4)) for i, m in enumerate(mu)] + [[3.0]]
    nc = noise_ceiling(ragged)
    assert nc.n_prompts == 300 and 0.6 < nc.ceiling_single < 1 and 0.6 < nc.loo < 1
    few = noise_ceiling([[1, 2], [3, 4]])
    assert few.ceiling_single is UNDEFINED and few.loo is UNDEFINED
    flat = noise_ceiling([[7, 7]] * 10)  # no variation anywhere: undefined, not 0
    assert flat.pairwise_r is UNDEFINED and flat.ceiling_mean_k is UNDEFINED


def test_bad_inputs_are_named():
    with pytest.raises(DataError, match="3 values but y_pred has 2"):
        evaluate([1, 2, 3], [1, 2])
    with pytest.raises(DataError, match="NaN"):
        evaluate([1, 2, np.nan], [1, 2, 3])
    with pytest.raises(ConfigError, match="valid: .*spearman"):
        evaluate([1, 2], [1, 2], ["spearmann"])


def test_noise_ceiling_bootstrap_ci_covers_estimate_and_truth():
    rng = np.random.default_rng(7)
    mu = rng.normal(0, 1, 400)
    samples = mu[:, None] + rng.normal(0, 1, (400, 4))
    nc = noise_ceiling(samples, n_boot=300, seed=0)
    truth = stats.spearmanr(mu, samples.mean(axis=1)).statistic
    for name in ("ceiling_loo", "ceiling_pairwise_r", "ceiling_single", "ceiling_mean_k"):
        lo, hi = nc.ci[name]
        assert lo <= nc.as_dict()[name] <= hi, name
    lo, hi = nc.ci["ceiling_mean_k"]
    assert lo <= truth <= hi and hi - lo < 0.1
    assert noise_ceiling(samples).ci == {}  # n_boot=0: no CI computed
