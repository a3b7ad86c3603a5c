"""Does the simulator forecast what a policy buys? Per folder, the paired gain of each policy over a baseline as
the engine measured it, beside the same gain in the simulator's replay of the same runs (each run's requests,
arrivals, answers and live predictions, on a profile: the calibration profile is out of sample), so a reader can
see whether the simulator's gains (T5's) hold where its absolute latencies miss by the machine's drift.

Per (load, policy, predictor, metric), from one replay's per-run fidelity rows (`real`, `sim`):
- `real_gain`: 1 − mean(policy) / mean(baseline) over the repeats, as `lengthpred.serve.paired`, with its 95%
  paired bootstrap interval (`ci_low`, `ci_high`; none with fewer than `paired.MIN_REPEATS` repeats);
- `sim_gain`: the same over the same repeats in the replay; `diff` = sim − real, in gain units;
- `inside`: the simulated gain falls in the real interval (NaN without one);
- `p_bias`: the exact sign-flip p of the per-repeat differences between the simulated and the real gain (each
  repeat's 1 − policy / baseline): a small p says the simulator's gain is off the engine's in a consistent direction;
- `drift`: the mean step-time drift (measured / modelled) of the policy's runs in those repeats, where the rows
  carry one: where the engine ran slower than the profile the real load was higher than the simulated one, which
  a ratio of two policies cancels only as far as both respond to load alike (`drift_table`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.metrics import spearman_or_nan
from lengthpred.serve.paired import gain_interval, pooled_gain, sign_flip_p
from lengthpred.serve.summary import METRICS  # the headline statistics of the summary page, in its words
from lengthpred.serve.tables_cli import md_table

COLUMNS = ["load", "policy", "predictor", "metric", "baseline", "n", "real_gain", "ci_low", "ci_high", "sim_gain",
           "diff", "inside", "p_bias", "drift"]
BIAS_P = 0.05


def gain_fidelity(fid: pd.DataFrame, baseline: str, metrics: Sequence[str] = tuple(METRICS),
                  skip: Sequence[str] = ()) -> pd.DataFrame:
    """`fid`: one replay's fidelity rows (policy, predictor, load, seed, metric, real, sim; a run left out of
    the replay, e.g. overloaded, leaves its repeat out of every gain it is part of). Empty when the folder did
    not run `baseline`. `skip`: policies not compared with this baseline (e.g. an earlier baseline, whose gain
    over this one is the mirror of this one's over it). The baseline's runs are those of its first predictor in
    sorted order (a folder runs each baseline with one). Duplicated (run, metric) rows are refused in one line."""
    if fid.empty or baseline not in set(fid["policy"]):
        return pd.DataFrame(columns=COLUMNS)
    keys = ["policy", "predictor", "load", "seed"]
    dup = fid.duplicated([*keys, "metric"])
    if dup.any():  # e.g. a seed merged twice: which run is the real one would be a guess
        raise DataError(f"gain fidelity: {int(dup.sum())} duplicated (run, metric) rows, e.g. "
                        f"{fid.loc[dup, [*keys, 'metric']].iloc[0].to_dict()}")
    wide = fid[fid["metric"].isin(metrics)].pivot_table(index=keys, columns="metric", values=["real", "sim"],
                                                        aggfunc="first")
    drift = (fid.groupby(keys)["drift"].first() if "drift" in fid.columns
             else pd.Series(math.nan, index=wide.index))
    rows = []
    for load in sorted(set(fid["load"])):
        at = wide[wide.index.get_level_values("load") == load]
        pols = sorted({(p, q) for p, q, _, _ in at.index})
        base = next((p for p in pols if p[0] == baseline), None)
        if base is None:
            continue
        for pol in pols:
            if pol == base or pol[0] in skip:
                continue
            seeds = sorted({k[3] for k in at.index if k[:2] == pol} & {k[3] for k in at.index if k[:2] == base})
            for m in metrics:
                if ("real", m) not in at.columns or ("sim", m) not in at.columns:
                    continue  # a statistic no run of the replay had
                v = {(w, p): np.array([at.loc[(*p, load, s), (w, m)] for s in seeds], float)
                     for w in ("real", "sim") for p in (pol, base)}
                ok = np.logical_and.reduce([np.isfinite(a) for a in v.values()])
                if not ok.any():
                    continue
                f, x, fs, xs = (v[k][ok] for k in (("real", base), ("real", pol), ("sim", base), ("sim", pol)))
                lo, hi, _ = gain_interval(f, x)
                real, sim = pooled_gain(f, x), pooled_gain(fs, xs)
                inside = float(lo <= sim <= hi) if math.isfinite(lo) and math.isfinite(sim) else math.nan
                with np.errstate(divide="ignore", invalid="ignore"):
                    d = (1 - xs / fs) - (1 - x / f)
                d[np.abs(d) < 1e-9] = 0.0  # rounding, not a difference (it would make an exact tie look biased)
                dr = np.array([drift.get((*pol, load, s), math.nan) for s in seeds], float)[ok]
                rows.append((float(load), pol[0], pol[1], m, baseline, int(ok.sum()), real, lo, hi, sim, sim - real,
                             inside, sign_flip_p(d), float(np.nanmean(dr)) if np.isfinite(dr).any() else math.nan))
    return pd.DataFrame(rows, columns=COLUMNS)


def _cell(r: pd.Series) -> str:
    if not math.isfinite(r.real_gain):
        return "—"
    real = (f"{100 * r.real_gain:+.0f}% [{100 * r.ci_low:+.0f}, {100 * r.ci_high:+.0f}]" if math.isfinite(r.ci_low)
            else f"{100 * r.real_gain:+.0f}% (n {r.n})")
    sim = "—" if not math.isfinite(r.sim_gain) else f"{100 * r.sim_gain:+.0f}%"
    mark = " ✓" if r.inside == 1 else " ✗" if r.inside == 0 else ""
    bias = "*" if math.isfinite(r.p_bias) and r.p_bias < BIAS_P else ""
    return f"{real} → {sim}{mark}{bias}"


def gain_table(folders: Sequence[tuple[str, pd.DataFrame]]) -> str:
    """Markdown: one row per (folder, baseline, load, policy), the mean drift of the policy's runs, and a cell per
    metric: the real gain [interval] → the simulated gain, ✓ inside the interval, ✗ outside, * the per-repeat
    differences biased (sign-flip p < 0.05)."""
    head = ["folder", "load", "over", "policy", "its runs' drift", *METRICS.values()]
    rows = []
    for name, g in folders:
        for (base, load, pol, pred), r in g.groupby(["baseline", "load", "policy", "predictor"], sort=False):
            by = r.set_index("metric")
            drift = float(r["drift"].mean())
            rows.append([name, f"{load:g}", base, pol if pred == "none" else f"{pol} ({pred})",
                         f"{drift:.3f}" if math.isfinite(drift) else "—",
                         *(_cell(by.loc[m]) if m in by.index else "—" for m in METRICS)])
    return md_table(head, rows).rstrip("\n")


def gain_totals(folders: Sequence[tuple[str, pd.DataFrame]]) -> dict[str, float]:
    """Over every cell with an interval: how many hold the simulated gain inside it, how many have an interval
    that excludes 0 and of those how many simulated gains share its sign, how many show a biased difference, and
    the median and largest |sim − real| in gain points."""
    g = _with_interval(folders)
    diff = (100 * g["diff"].astype(float)).abs()
    clear = g[(g["ci_low"] > 0) | (g["ci_high"] < 0)]
    return {"cells": len(g), "inside": int((g["inside"] == 1).sum()), "clear": len(clear),
            "same_sign": int((np.sign(clear["sim_gain"]) == np.sign(clear["real_gain"])).sum()),
            "biased": int((g["p_bias"] < BIAS_P).sum()),
            "median_abs_diff": float(diff.median()) if len(g) else math.nan,
            "max_abs_diff": float(diff.max()) if len(g) else math.nan}


def _with_interval(folders: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """Every folder's rows that have an interval and a simulated gain."""
    frames = [f for _, f in folders if len(f)]
    g = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    return g[np.isfinite(g["ci_low"].astype(float)) & np.isfinite(g["sim_gain"].astype(float))]


def drift_table(folders: Sequence[tuple[str, pd.DataFrame]]) -> str:
    """Markdown: per metric, over the cells with an interval, the Spearman correlation between sim − real and the
    policy runs' mean drift (cells of one folder share runs: a description, not a test)."""
    g = _with_interval(folders)
    g = g[np.isfinite(g["drift"].astype(float))]
    rows = []
    for m, name in METRICS.items():
        c = g[g["metric"] == m]
        rho = spearman_or_nan(c["diff"].to_numpy(float), c["drift"].to_numpy(float))
        rows.append([name, str(len(c)), "—" if not math.isfinite(rho) else f"{rho:+.2f}",
                     f"{c['drift'].min():.2f}–{c['drift'].max():.2f}" if len(c) else "—"])
    return md_table(["statistic", "gains", "Spearman(sim − real, drift)", "drift of the policy's runs"],
                    rows).rstrip("\n")


def gains_page(gains: Mapping[str, Sequence[tuple[str, pd.DataFrame]]], replays: Mapping[str, str]) -> str:
    """Markdown: every cell of the first replay (`gains[replay]`: (folder, `gain_fidelity` rows) pairs), then the
    totals under each replay (`replays`: replay → what it is, in words)."""
    head = ["replay", "gains with an interval", "simulated gain inside it", "interval excludes 0",
            "of those, simulated gain of that sign", "biased (p < 0.05)", "median difference", "largest difference"]
    rows = []
    for attr, what in replays.items():
        t = gain_totals(gains[attr])
        rows.append([what, str(t["cells"]), str(t["inside"]), str(t["clear"]), str(t["same_sign"]), str(t["biased"]),
                     f"{t['median_abs_diff']:.1f} points", f"{t['max_abs_diff']:.1f} points"])
    first = next(iter(replays))
    return ("**Does the simulator forecast the gains?** Each policy's paired gain over the baseline on the engine "
            "[95% interval over repeats] → the same gain in the simulator's replay of the same runs at "
            f"{replays[first]}; ✓ inside the interval, ✗ outside, * the per-repeat differences "
            "between the two gains lean one way (sign-flip p < 0.05). The engine's interval measures how much its "
            "repeats vary, not a tolerance: a wide one (TTFT) holds a large miss, so read the differences too\n\n"
            + gain_table(gains[first])
            + "\n\n**The gains under each replay** (cells with an interval; |simulated − real| in gain points)\n\n"
            + md_table(head, rows).rstrip("\n")
            + "\n\n**Where the simulated gain leans with the machine's speed** (the first replay; drift: the policy "
            "runs' measured / modelled step time, over 1 where the engine ran slower than the profile)\n\n"
            + drift_table(gains[first]))
