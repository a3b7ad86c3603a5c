"""Runs over seeds → the tidy T5 inputs (means with bootstrap intervals, gains over FCFS) and short text tables.

- `summarize_runs`: mean over seeds with a percentile-bootstrap interval of the mean (resampling seeds),
  which never leaves the quantity's range (docs/AUDIT: intervals that leave the range mean the method does
  not fit). Use ≥ 10 seeds: with fewer, a percentile interval is coarse and usually too narrow.
- `gains`: per (policy, predictor, load) the gain of mean per-token latency over FCFS and its share of the
  clairvoyant oracle's gain, paired over seeds. The share is `UNDEFINED` at a load where the oracle's own
  gain interval does not lie above 0, or its point gain is below `min_oracle_gain` percentage points
  (default 2): a ratio over a gain that may be nothing, or next to nothing, says nothing (0.3% gives shares
  of −600%). The share has no meaningful zero of its own (short-prompt-first helps by itself): read it
  against the ``random`` row (a random key per prompt), the anchor.
- `format_table`, `short_t5`: what scripts/simulate.py and the demo print.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.metrics import UNDEFINED, is_undefined
from lengthpred.sched.core.metrics import bootstrap_mean_intervals
from lengthpred.sched.sweep.pool import CLAIRVOYANT, MEAN_ORACLE, NO_PREDICTOR, RANDOM

log = logging.getLogger("lengthpred.sched")
KEY = "per_token_latency_mean"
MIN_SEEDS = 10  # fewer: intervals over seeds are rough (a warning says so)
MIN_ORACLE_GAIN = 2.0  # percentage points: below it the oracle's gain is too small a base for shares
SUMMARY_KEYS = ["hardware", "data", "policy", "predictor", "load", "metric"]
GAIN_COLUMNS = ["policy", "predictor", "load", "metric", "value", "ci_low", "ci_high", "n"]


def summarize_runs(runs: pd.DataFrame, level: float = 0.95, n_boot: int = 2000) -> pd.DataFrame:
    """Mean over seeds with a percentile-bootstrap interval, per (hardware, data, policy, predictor, load,
    metric); n = seeds with a finite value."""
    wide = runs.set_index([*SUMMARY_KEYS, "seed"])["value"].unstack("seed")  # [groups, seeds], NaN kept
    n_seeds = wide.shape[1]
    if n_seeds < MIN_SEEDS:
        log.warning("%d seeds: intervals over so few seeds are rough; use >= %d", n_seeds, MIN_SEEDS)
    v = wide.to_numpy(float)  # [groups, seeds]
    mean, lo, hi = bootstrap_mean_intervals(v, level, n_boot)
    out = wide.index.to_frame(index=False)
    out["load"] = out["load"].astype(float)
    return out.assign(value=mean, ci_low=lo, ci_high=hi, n=np.isfinite(v).sum(axis=1).astype(int))


def gains(runs: pd.DataFrame, metric: str = KEY, level: float = 0.95, n_boot: int = 1000,
          min_oracle_gain: float = MIN_ORACLE_GAIN) -> pd.DataFrame:
    """Gain of `metric` over FCFS, 1 − mean(x)/mean(FCFS), and share of the clairvoyant oracle's gain,
    (mean(FCFS) − mean(x)) / (mean(FCFS) − mean(oracle)), means over seeds (oracle: the oracle policy with the
    lowest mean); percentile intervals by a paired bootstrap over seeds. Shares (and their intervals) are
    UNDEFINED at a load where the oracle's gain interval does not lie above 0, where its point gain is below
    `min_oracle_gain` percentage points, or where there is none."""
    d = runs[runs["metric"] == metric].pivot_table(index=["load", "seed"], columns=["policy", "predictor"],
                                                   values="value")
    fcfs_cols = [c for c in d.columns if c[0] == "fcfs"]
    if not fcfs_cols:
        return pd.DataFrame(columns=GAIN_COLUMNS)
    oracle_cols = [c for c in d.columns if c[1] == CLAIRVOYANT]
    q = [(1 - level) / 2, (1 + level) / 2]
    rng = np.random.default_rng(0)
    rows = []
    for load in sorted(d.index.get_level_values("load").unique()):
        dl = d.xs(load, level="load")
        f = dl[fcfs_cols[0]].to_numpy()
        n = len(f)
        boots = rng.integers(0, n, (n_boot, n)) if n > 1 else None
        best = min(oracle_cols, key=lambda c: dl[c].mean()) if oracle_cols else None
        o = dl[best].to_numpy() if best is not None else np.full(n, np.nan)
        oracle_lo = _interval(f, o, o, boots, q)[0][0] if boots is not None else math.nan
        oracle_gain = _gain_share(f, o, o, np.arange(n))[0]
        share_defined = oracle_lo > 0 and 100 * oracle_gain >= min_oracle_gain  # NaN (no oracle, 1 seed): False
        for pol, pred in d.columns:
            x = dl[(pol, pred)].to_numpy()
            point = _gain_share(f, x, o, np.arange(n))
            ci = _interval(f, x, o, boots, q) if boots is not None else np.full((2, 2), np.nan)
            rows.append((pol, pred, float(load), "gain_vs_fcfs", point[0], ci[0, 0], ci[0, 1], n))
            share = (point[1], ci[1, 0], ci[1, 1]) if share_defined else (UNDEFINED,) * 3
            rows.append((pol, pred, float(load), "share_of_oracle", *share, n))
    return pd.DataFrame(rows, columns=GAIN_COLUMNS)


def _interval(f: np.ndarray, x: np.ndarray, o: np.ndarray, boots: np.ndarray, q: list[float]) -> np.ndarray:
    """[[gain lo, gain hi], [share lo, share hi]] over the bootstrap resamples `boots` ([B, n] seed indices)."""
    bs = np.array([_gain_share(f, x, o, b) for b in boots])  # [B, 2]
    ci = np.full((2, 2), np.nan)
    for k in range(2):
        v = bs[:, k][np.isfinite(bs[:, k])]
        if len(v):
            ci[k] = np.quantile(v, q)
    return ci


def _gain_share(f: np.ndarray, x: np.ndarray, o: np.ndarray, i: np.ndarray) -> tuple[float, float]:
    mf, mx, mo = f[i].mean(), x[i].mean(), o[i].mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(1 - mx / mf), float((mf - mx) / (mf - mo)) if mf != mo else np.nan


def _num(v: Any) -> float | None:
    """A results value as a float; None when undefined or missing (UNDEFINED, "undefined", NaN, None)."""
    if v is None or is_undefined(v) or (isinstance(v, str) and v.strip().lower() == "undefined"):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _pct(v: Any, lo: Any, hi: Any, sign: str = "+") -> str:
    if _num(v) is None:
        return "undefined" if v is not None and not (isinstance(v, float) and math.isnan(v)) else ""
    txt = f"{100 * _num(v):{sign}.1f}%"
    if _num(lo) is not None and _num(hi) is not None:
        txt += f" [{100 * _num(lo):{sign}.1f}, {100 * _num(hi):{sign}.1f}]"
    return txt


def _gain_lookup(gain: pd.DataFrame) -> dict[tuple[str, str, float, str], Any]:
    return {(str(r.policy), str(r.predictor), float(r.load), str(r.metric)): r for r in gain.itertuples(index=False)}


def format_table(summary: pd.DataFrame, gain: pd.DataFrame) -> str:
    """A small T5-like text table: mean per-token latency [95% CI], gain vs FCFS, share of the oracle's gain."""
    s = summary[summary["metric"] == KEY]
    g = _gain_lookup(gain)
    lines = [f"{'load':>5} {'policy':<12} {'predictor':<18} {'ptl mean (ms/tok) ↓ [95% CI]':>30} "
             f"{'gain vs FCFS [95% CI]':>24} {'share of oracle gain':>24}"]
    for r in s.sort_values(["load", "policy", "predictor"]).itertuples():
        gr, sr = (g.get((r.policy, r.predictor, float(r.load), m)) for m in ("gain_vs_fcfs", "share_of_oracle"))
        lines.append(f"{r.load:>5.2f} {r.policy:<12} {r.predictor:<18} {_ms(r.value, r.ci_low, r.ci_high):>30} "
                     f"{_pct(*_vlh(gr)):>24} {_pct(*_vlh(sr), sign=''):>24}")
    return "\n".join(lines)


def _vlh(r: Any) -> tuple[Any, Any, Any]:
    return (None, None, None) if r is None else (r.value, r.ci_low, r.ci_high)


def _ms(v: Any, lo: Any, hi: Any) -> str:
    if _num(v) is None:
        return "undefined"
    txt = f"{1e3 * _num(v):.1f}"
    if _num(lo) is not None and _num(hi) is not None:
        txt += f" [{1e3 * _num(lo):.1f}, {1e3 * _num(hi):.1f}]"
    return txt


def below_capacity(loads: Sequence[float]) -> float:
    """The highest load below the server's capacity (< 1); the lowest load when none is below."""
    loads = sorted({float(x) for x in loads})
    under = [x for x in loads if x < 1.0]
    return under[-1] if under else loads[0]


def short_t5(summary: pd.DataFrame, gain: pd.DataFrame | None, *, load: float | None = None,
             policies: Sequence[str] = ("fcfs", "sjf", "oracle-sjf")) -> str:
    """The short T5 the demo prints: at `load` (default: the highest load below capacity), FCFS, the
    clairvoyant oracle, the mean-oracle and every head under SJF: mean per-token latency, gain over FCFS
    and share of the oracle's gain, with 95% intervals over seeds."""
    load = below_capacity(summary["load"]) if load is None else float(load)
    where = "below capacity" if load < 1 else "at or above capacity: queues grow, read with care"
    s = summary[(summary["metric"] == KEY) & (summary["load"].astype(float) == load)
                & summary["policy"].isin(list(policies))]
    g = _gain_lookup(gain) if gain is not None else {}
    rank = {NO_PREDICTOR: 0, CLAIRVOYANT: 1, MEAN_ORACLE: 2, RANDOM: 3}
    rows = []
    for r in s.itertuples():
        gr, sr = (g.get((r.policy, r.predictor, load, m)) for m in ("gain_vs_fcfs", "share_of_oracle"))
        rows.append((rank.get(r.predictor, 4), -(_num(gr.value) or 0.0) if gr is not None else 0.0, r.policy,
                     r.predictor, _ms(r.value, r.ci_low, r.ci_high), _pct(*_vlh(gr)), _pct(*_vlh(sr), sign="")))
    rows.sort(key=lambda t: t[:4])
    n = int(s["n"].max()) if "n" in s.columns and len(s) else 0
    head = ("policy", "predictor", "ms/token ↓ [95% CI]", "gain vs FCFS ↑ [95% CI]", "share of oracle gain")
    width = [max(len(str(x)) for x in col) for col in zip(head, *(r[2:] for r in rows), strict=True)]
    lines = [f"**T5 (short). Mean per-token latency at load {load:g} ({where}), {n} seeds**", "",
             "  ".join(h.ljust(w) for h, w in zip(head, width, strict=True))]
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(r[2:], width, strict=True)) for r in rows]
    lines += ["", f"{CLAIRVOYANT}: knows each request's own sampled length; {MEAN_ORACLE}: the leave-one-out mean "
              f"of the prompt's other samples; {RANDOM}: a random length per prompt (the anchor: compare shares "
              "with its row, not with 0). Share: of the clairvoyant oracle's gain (undefined when that gain's "
              f"interval reaches 0 or it is below {MIN_ORACLE_GAIN:g} points)."]
    return "\n".join(lines)
