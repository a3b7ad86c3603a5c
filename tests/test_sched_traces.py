"""Trace workloads: noisy oracles hit their Spearman, heads are matched into a trace without leaking its lengths,
and the trace grid gives gains with in-range intervals and a gain-vs-Spearman curve."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError
from lengthpred.metrics import UNDEFINED, spearman_or_nan
from lengthpred.sched import get_profile
from lengthpred.sched.sweep.experiment import parse_policies
from lengthpred.sched.sweep.pool import LengthSource
from lengthpred.sched.traces.experiment import quality_curve, run_traces, spearman_needed, trace_gains
from lengthpred.sched.traces.head_mapping import PROMPT_MEAN, map_heads, seed_pool
from lengthpred.sched.traces.noisy_oracle import noisy_oracle
from lengthpred.sched.traces.report import needed_table, policy_table, quality_table, window_table
from lengthpred.sched.traces.windows import trace_windows, window_stats


def _tied_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Trace-like output lengths: heavy-tailed and with many ties (Azure code has 112 distinct values in 1000)."""
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(np.exp(rng.normal(3.0, 1.2, n))), 1, 2000).astype(np.int64)


@pytest.mark.parametrize("target", [-0.5, 0.0, 0.2, 0.5, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("tied", [False, True])
def test_noisy_oracle_hits_its_spearman_and_keeps_the_lengths(target, tied):
    rng = np.random.default_rng(1)
    y = _tied_lengths(800) if tied else np.exp(rng.normal(5, 1, 800))
    p = noisy_oracle(y, target, rng=np.random.default_rng(7))
    assert spearman_or_nan(y, p) == pytest.approx(target, abs=0.005)
    assert np.array_equal(np.sort(p), np.sort(y))  # a permutation: the lengths' own distribution


def test_noisy_oracle_reproducible_and_checked():
    y = _tied_lengths(300)
    a = noisy_oracle(y, 0.6, rng=np.random.default_rng(3))
    assert np.array_equal(a, noisy_oracle(y, 0.6, rng=np.random.default_rng(3)))
    assert not np.array_equal(a, noisy_oracle(y, 0.6, rng=np.random.default_rng(4)))
    with pytest.raises(ConfigError, match="Spearman"):
        noisy_oracle(y, 1.2, rng=np.random.default_rng(0))


def _pool(preds: dict[str, np.ndarray], samples: list[list[int]]) -> LengthSource:
    mean = np.array([np.mean(s) for s in samples])
    return LengthSource("pool", np.rint(mean).astype(np.int64), np.full(len(samples), 50), preds, samples=samples)


def test_matched_heads_carry_the_heads_ranking_and_nothing_else():
    rng = np.random.default_rng(0)
    m = 60
    mean = np.exp(rng.normal(5, 0.8, m))
    samples = [[int(x) for x in np.maximum(1, np.rint(mu * np.exp(0.3 * rng.standard_normal(3))))] for mu in mean]
    pool = _pool({"perfect": mean, "inverse": -mean, "constant": np.full(m, 7.0)}, samples)
    y = _tied_lengths(900, seed=2)
    preds, q = map_heads(pool, y, np.random.default_rng(5))
    assert set(preds) == {"perfect", "inverse", "constant", PROMPT_MEAN}
    assert np.unique(preds["constant"]).tolist() == [np.sort(y)[len(y) // 2]]  # the trace's median for everyone
    rho = {h: spearman_or_nan(y, p) for h, p in preds.items()}
    q = q.set_index("predictor")
    assert rho["perfect"] == pytest.approx(q.loc["perfect", "pool_spearman"], abs=0.08)  # the head's own error
    assert rho["perfect"] > 0.8 and rho["inverse"] == pytest.approx(-rho["perfect"], abs=0.05)
    assert math.isnan(rho["constant"]) and math.isnan(q.loc["constant", "pool_spearman"])
    assert set(np.unique(preds["perfect"])) <= set(y.tolist())  # on the trace's own scale
    # requests matched to one pool entry share one prediction: nothing of a request's own length leaks through
    assert len(np.unique(preds["perfect"])) <= 3 * m


def _trace_df(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(0.5, 2.0, n)
    return pd.DataFrame({"arrival_s": np.cumsum(gaps) - gaps[0], "prompt_tokens": rng.integers(50, 1500, n),
                         "output_tokens": _tied_lengths(n, seed) * 4})


@pytest.fixture(scope="module")
def trace_run():
    rng = np.random.default_rng(1)
    m = 40
    mean = np.exp(rng.normal(5, 0.8, m))
    samples = [[int(x) for x in np.maximum(1, np.rint(mu * np.exp(0.3 * rng.standard_normal(3))))] for mu in mean]
    pool = _pool({"good": mean * np.exp(0.3 * rng.standard_normal(m)), "flat": np.full(m, 3.0)}, samples)
    ws = {"toy": trace_windows(_trace_df(2400), "toy", n_requests=200, n_windows=10)}
    prof = get_profile("a100-llama2-7b").with_overrides(max_batch=8, kv_blocks=600)
    pol = parse_policies(["fcfs", "sjf", "srpt", "mlfq", "oracle-sjf", "oracle-srpt"])
    runs, lat, preds = run_traces(ws, prof, pol, loads=[0.9], seeds=list(range(10)),
                                  spearman_levels=[0.0, 0.5, 1.0], pool=pool, progress=False)
    return ws, prof, runs, lat, preds


def test_trace_grid_gains_and_curve(trace_run):
    ws, prof, runs, lat, preds = trace_run
    assert set(runs["seed"]) == set(range(10)) and set(runs["data"]) == {"toy"}
    assert {"noisy@0", "noisy@0.5", "noisy@1", "good", "flat", PROMPT_MEAN} <= set(runs["predictor"])
    assert set(lat["data"]) == {"toy"} and len(lat) > 0
    noisy = preds[preds["kind"] == "noisy"]
    assert np.abs(noisy["spearman"] - noisy["target"]).max() <= 0.005  # on every window
    gain = trace_gains(runs)
    assert set(gain["latency_metric"]) == {"per_token_latency_mean", "per_token_latency_p99", "jct_mean"}
    g = gain[gain["metric"] == "gain_vs_fcfs"].astype({"value": float, "ci_low": float, "ci_high": float})
    assert ((g["ci_low"] <= g["value"] + 1e-12) & (g["value"] <= g["ci_high"] + 1e-12)).all()
    assert (g["value"] < 1).all()  # a latency gain can never reach 100%
    curve = quality_curve(gain, preds)
    sjf = curve[(curve["policy"] == "sjf") & (curve["kind"] == "noisy")
                & (curve["latency_metric"] == "per_token_latency_mean")].sort_values("spearman")
    assert sjf["spearman"].tolist() == pytest.approx([0.0, 0.5, 1.0], abs=0.005)
    assert (sjf["spearman_lo"] <= sjf["spearman"]).all() and (sjf["spearman"] <= sjf["spearman_hi"]).all()
    # a perfect ranking under SJF is the clairvoyant oracle-sjf itself: the same runs, the same gain
    o = curve[(curve["policy"] == "oracle-sjf") & (curve["latency_metric"] == "per_token_latency_mean")]
    assert sjf["gain"].iloc[-1] == pytest.approx(float(o["gain"].iloc[0]), abs=1e-9)
    assert sjf["gain"].iloc[-1] > sjf["gain"].iloc[0]  # rank information pays
    flat = preds[preds["predictor"] == "flat"]
    assert flat["spearman"].isna().all()  # a constant head has no ranking: undefined, never 0
    # tables and the window report build from the tidy frames
    summary = __import__("lengthpred.sched.sweep.summary", fromlist=["summarize_runs"]).summarize_runs(runs)
    assert "noisy@0.5" in policy_table(summary, gain, preds, levels=[0.5])
    assert "good" in quality_table(curve)
    assert "toy" in needed_table(spearman_needed(curve))
    assert "inter-arrival CV" in window_table(window_stats(ws["toy"], prof, [0.9]))


def test_spearman_needed_interpolates_and_refuses_a_null_oracle():
    rows = []
    for rho, gain in [(0.0, 0.0), (0.5, 0.2), (1.0, 0.4)]:
        rows.append(dict(data="d", latency_metric="m", load=0.9, policy="sjf", predictor=f"noisy@{rho:g}",
                         kind="noisy", spearman=rho, gain=gain, gain_lo=gain, gain_hi=gain))
    oracle = dict(data="d", latency_metric="m", load=0.9, policy="oracle-sjf", predictor="clairvoyant",
                  kind="oracle", spearman=math.nan, gain=0.5, gain_lo=0.1, gain_hi=0.9)
    out = spearman_needed(pd.DataFrame([*rows, oracle]))
    assert out["spearman_needed"].iloc[0] == pytest.approx(0.625)  # half of 0.5 = 0.25, between 0.5 and 1.0
    out = spearman_needed(pd.DataFrame([*rows, {**oracle, "gain_lo": -0.1}]))
    assert out["spearman_needed"].iloc[0] == UNDEFINED


def test_a_head_named_like_a_noisy_oracle_is_refused():
    pool = _pool({"noisy@0.5": np.arange(1.0, 11.0)}, [[i + 1] for i in range(10)])
    ws = {"toy": trace_windows(_trace_df(200), "toy", n_requests=100, n_windows=1)}
    with pytest.raises(ConfigError, match="share a name"):
        run_traces(ws, get_profile("a100-llama2-7b"), parse_policies(["fcfs", "sjf"]), loads=[0.5], seeds=[0],
                   spearman_levels=[0.5], pool=pool, progress=False)


def test_prompt_mean_leaves_the_matched_entrys_own_sample_out():
    """Each prompt sampled [1, 1000]: the full prompt mean (500.5 for all) would key every entry alike; the
    leave-one-out mean keys the long entry on the short sample and vice versa (Spearman −1 on the pool)."""
    pool = LengthSource("p", np.full(50, 500.5), np.full(50, 10), {"h": np.arange(50.0)},
                        samples=[[1, 1000]] * 50)
    _, q = map_heads(pool, np.arange(1, 201, dtype=float), np.random.default_rng(0))
    q = q.set_index("predictor")
    assert q.loc[PROMPT_MEAN, "pool_spearman"] == pytest.approx(-1.0)
    assert q.loc[PROMPT_MEAN, "pool_entries"] == 100 and q.loc[PROMPT_MEAN, "pool_prompts"] == 50


def _split_pool(m: int = 12, seed: int = 0) -> LengthSource:
    """A head perfect on half the prompts and reversed on the other half: its error profile depends on which
    prompts the pool holds, so a pool of m is an uncertain sample of it."""
    rng = np.random.default_rng(seed)
    mean = np.exp(rng.normal(5, 0.8, m))
    samples = [[int(x) for x in np.maximum(1, np.rint(mu * np.exp(0.2 * rng.standard_normal(3))))] for mu in mean]
    return _pool({"split": np.where(np.arange(m) % 2 == 0, mean, 1e4 / mean)}, samples)


def test_resample_pool_keeps_each_prompts_pairs_and_is_fixed_by_the_seed():
    base = _split_pool(m=30)
    pool = LengthSource("pool", base.output, 100 + np.arange(30), base.preds, samples=base.samples)  # prompt ids
    a, b = seed_pool(pool, 3, True), seed_pool(pool, 3, True)
    assert seed_pool(pool, 3, False) is pool
    assert np.array_equal(a.output, b.output) and np.array_equal(a.preds["split"], b.preds["split"])
    assert not np.array_equal(a.prompt, seed_pool(pool, 4, True).prompt)  # a fresh resample per seed
    assert len(a.output) == len(pool.output) and len(np.unique(a.prompt)) < len(pool.output)  # with replacement
    # every resampled prompt keeps its own (true, predicted) pair, sampled lengths and prompt tokens
    for k, i in enumerate(a.prompt - 100):
        assert a.preds["split"][k] == pool.preds["split"][i] and list(a.samples[k]) == list(pool.samples[i])
        assert a.output[k] == pool.output[i]


def _curve(pool: LengthSource, boot: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    ws = {"toy": trace_windows(_trace_df(2400), "toy", n_requests=200, n_windows=10)}
    prof = get_profile("a100-llama2-7b").with_overrides(max_batch=8, kv_blocks=600)
    runs, _, preds = run_traces(ws, prof, parse_policies(["fcfs", "sjf"]), loads=[0.9], seeds=list(range(10)),
                                spearman_levels=[0.5], pool=pool, progress=False, pool_bootstrap=boot)
    curve = quality_curve(trace_gains(runs), preds)
    return curve, preds


def test_pool_bootstrap_widens_the_heads_intervals_by_the_pools_variability():
    """Old behaviour (one fixed pool for every window): the head's achieved Spearman barely moves between
    windows, and the interval says the head is known to ±0.005 although 12 prompts could not tell that."""
    pool = _split_pool()
    width = {}
    for boot in (False, True):
        curve, preds = _curve(pool, boot)
        r = curve[(curve["predictor"] == "split") & (curve["policy"] == "sjf")
                  & (curve["latency_metric"] == "per_token_latency_mean")].iloc[0]
        width[boot] = (r["spearman_hi"] - r["spearman_lo"], r["gain_hi"] - r["gain_lo"])
        h = preds[preds["predictor"] == "split"]
        assert (h["pool_resampled"] == boot).all() and (h["pool_prompts"] == 12).all()
        # the noisy oracles do not depend on the switch (their own stream)
        assert np.abs(preds.loc[preds["kind"] == "noisy", "spearman"] - 0.5).max() <= 0.005
    assert width[True][0] > 10 * width[False][0]  # the Spearman's interval
    assert width[True][1] > 1.5 * width[False][1]  # the gain's interval
    # the tables say what the intervals cover
    on, off = quality_table(_curve(pool, True)[0]), quality_table(_curve(pool, False)[0])
    assert "own resample of the 12-prompt test pool" in on and "cover window and prompt-pool variability" in on
    assert "over windows only" in off and "12-prompt test pool" in off


def test_pool_resample_is_shared_by_every_policy_and_trace_of_a_seed(monkeypatch):
    """Paired: a seed's resample is drawn once, mapped into each of its windows, and every policy of the grid
    runs on those same predictions (one run_grid call per window, with all policies)."""
    from lengthpred.sched.traces import experiment as te

    seen_pools, grid_calls = [], []
    real_map, real_grid = te.map_heads, te.run_grid

    def map_spy(pool, output, rng, heads=None):
        seen_pools.append(pool)
        return real_map(pool, output, rng, heads)

    def grid_spy(src, profile, policies, **kw):
        grid_calls.append((src.name, kw["seeds"][0], tuple(p.label for p in policies), dict(src.preds)))
        return real_grid(src, profile, policies, **kw)

    monkeypatch.setattr(te, "map_heads", map_spy)
    monkeypatch.setattr(te, "run_grid", grid_spy)
    pool = _split_pool(m=20)
    df = _trace_df(800)
    ws = {"a": trace_windows(df, "a", n_requests=100, n_windows=3),
          "b": trace_windows(df.iloc[::-1].reset_index(drop=True).assign(arrival_s=df["arrival_s"].to_numpy()), "b",
                             n_requests=100, n_windows=3)}
    pol = parse_policies(["fcfs", "sjf", "srpt"])
    _, _, preds = te.run_traces(ws, get_profile("a100-llama2-7b"), pol, loads=[0.8], seeds=[5, 6, 7],
                                spearman_levels=[0.5], pool=pool, progress=False)
    assert [p is q for p, q in zip(seen_pools[:3], seen_pools[3:], strict=True)] == [True] * 3  # a's and b's seeds
    assert len({id(p) for p in seen_pools}) == 3 and all(p is not pool for p in seen_pools)
    assert len(grid_calls) == 6 and all(c[2] == ("fcfs", "sjf", "srpt") for c in grid_calls)
    # the resample's pool Spearman is the same for both traces of a seed, and moves between seeds
    h = preds[preds["predictor"] == "split"].pivot_table(index="seed", columns="data", values="pool_spearman")
    assert np.allclose(h["a"], h["b"]) and h["a"].nunique() == 3
    seen_pools.clear()
    te.run_traces(ws, get_profile("a100-llama2-7b"), pol, loads=[0.8], seeds=[5, 6, 7], spearman_levels=[0.5],
                  pool=pool, progress=False, pool_bootstrap=False)
    assert all(p is pool for p in seen_pools)  # the old behaviour, kept behind the switch


def _synthetic_curve(n_heads: int = 14) -> pd.DataFrame:
    """A quality curve whose heads cluster (Spearman 0.45–0.50, as the demo's egtp/estp/linear do), plus a
    constant head (undefined Spearman) and the prompt-mean."""
    rng = np.random.default_rng(0)
    rows = []
    heads = [f"head_{i:02d}" for i in range(n_heads)]
    for data in ("trace_a", "trace_b"):
        for m in ("per_token_latency_mean", "per_token_latency_p99", "jct_mean"):
            def row(policy, predictor, kind, rho, gain, m=m, data=data):
                rows.append(dict(data=data, latency_metric=m, policy=policy, predictor=predictor, load=0.9,
                                 gain=gain, gain_lo=gain - 0.03, gain_hi=gain + 0.03, spearman=rho,
                                 spearman_lo=rho - 0.01, spearman_hi=rho + 0.01, kind=kind, target=math.nan))
            for pol, off in (("sjf", 0.0), ("srpt", -0.05)):
                for lvl in np.linspace(0, 1, 11):
                    row(pol, f"noisy@{lvl:g}", "noisy", lvl, 0.4 * lvl + off)
                for i, h in enumerate(heads):
                    rho = 0.45 + 0.05 * i / n_heads
                    row(pol, h, "head", rho, 0.4 * rho + off + 0.01 * rng.standard_normal())
                row(pol, "constant", "head", math.nan, 0.0)
                row(pol, PROMPT_MEAN, "prompt-mean", 0.48, 0.19 + off)
                row(f"oracle-{pol}", "clairvoyant", "oracle", math.nan, 0.4 + off)
            row("mlfq", "none", "none", math.nan, -0.05)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n_heads", [3, 14, 30])
def test_quality_figure_names_every_head_without_overlap(n_heads):
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    from lengthpred.figures import MAX_SERIES
    from lengthpred.sched.traces.plots import quality_figure

    fig = quality_figure(_synthetic_curve(n_heads), 0.9)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2 * 4  # 2 traces × (3 latency metrics + the heads' key)
    for ax in axes:
        series = [a for a in [*ax.get_lines(), *ax.collections, *ax.containers]
                  if not str(a.get_label()).startswith("_") and a.get_label()]
        assert len(series) <= MAX_SERIES
        colours = []
        for a in series:
            art = a.lines[0] if hasattr(a, "lines") else a
            col = art.get_color() if hasattr(art, "get_color") else art.get_facecolor()[0]
            colours.append(mcolors.to_hex(col))
        assert len(set(colours)) == len(colours), colours
        assert not ax.texts and ax.get_legend() is None  # no labels on the data, no legend over it
    keys = axes[3::4]
    for ax in keys:
        labels = [t for t in ax.get_yticklabels() if t.get_text()]
        assert {t.get_text().split(" (")[0] for t in labels} == {*(f"head_{i:02d}" for i in range(n_heads)),
                                                                   "constant", PROMPT_MEAN}
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.y0)
        assert all(lo.y1 <= hi.y0 for lo, hi in zip(boxes, boxes[1:], strict=False))  # no two names overlap
        assert "ρ undefined" in " ".join(t.get_text() for t in labels)  # the constant head, not ρ 0
    (legend,) = fig.legends
    right = max(ax.get_window_extent(renderer).x1 for ax in axes)
    assert legend.get_window_extent(renderer).x0 >= right - 1  # one legend, right of every panel
    plt.close(fig)


def test_quality_figure_without_heads_has_no_key():
    import matplotlib.pyplot as plt

    from lengthpred.sched.traces.plots import quality_figure

    c = _synthetic_curve(2)
    fig = quality_figure(c[~c["kind"].isin(["head", "prompt-mean"])], 0.9)
    assert len(fig.axes) == 2 * 3
    plt.close(fig)
