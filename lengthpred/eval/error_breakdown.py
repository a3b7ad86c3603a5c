"""Where the gap to the noise ceiling is, part 2: the test error by domain, prompt length, capped share and answer
length, and whether the prompts every head gets wrong are noise.

Inputs: one row per test prompt (`id`, `domain`, `y_true` the mean of its sampled lengths, a capped one at the
cap, `prompt_tokens`, `capped_frac`) and each head's prediction (`pred:<head>`), plus every prompt's sampled
lengths. Per bin of a dimension: n, the noise ceiling of the bin's prompts (as T1's: the mean pairwise Spearman
of the samples, corrected to the mean of k), each head's Spearman, and its median absolute log error
|log1p ŷ − log1p y| (a factor: 0.69 is off by 2×), each with a 95% bootstrap interval over the bin's prompts.
Spearman inside a bin ranks a narrower range than the pooled one, so read it against the bin's own ceiling.

"Every head wrong": a prompt every head misses by more than `factor`× (|log error| > log `factor`). Is that
noise? Each prompt's own samples say how far its target (a mean of k samples) may sit from its expected length:
its standard error on the log scale, sd(log1p samples) / √k. The table compares those prompts with the rest:
their sample spread, the share whose error lies within 2 standard errors of their own target (noise could
explain it), and the share with a capped sample (a target that is a lower bound).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from lengthpred.metrics import spearman_rows

DIMENSIONS = ("domain", "prompt tokens", "capped share", "answer length")


def bins(frame: pd.DataFrame, dimension: str, n_quantiles: int = 4) -> pd.Series:
    """The bin label of every row for one of DIMENSIONS (quartiles of prompt tokens and of the answer length;
    the capped share as its k + 1 values)."""
    if dimension == "domain":
        return frame["domain"].astype(str)
    if dimension == "capped share":
        return frame["capped_frac"].map(lambda v: f"{v:.2f}")
    col = {"prompt tokens": "prompt_tokens", "answer length": "y_true"}[dimension]
    q = pd.qcut(frame[col].rank(method="first"), n_quantiles, labels=False)
    edges = frame.groupby(q)[col].agg(["min", "max"])
    return q.map(lambda i: f"Q{int(i) + 1}: {edges.loc[i, 'min']:.0f}–{edges.loc[i, 'max']:.0f}")


def _boot_idx(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    return np.vstack([np.arange(n)[None, :], rng.integers(0, n, size=(n_boot, n))])


def _interval(v: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(point = row 0, low, high) of replicate rows 1.. (NaN where none is finite)."""
    rest = v[1:][np.isfinite(v[1:])]
    if not len(rest):
        return float(v[0]), math.nan, math.nan
    a = (1 - confidence) / 2
    return float(v[0]), float(np.quantile(rest, a)), float(np.quantile(rest, 1 - a))


def breakdown(frame: pd.DataFrame, samples: np.ndarray, heads: Sequence[str], dimension: str, *, n_boot: int = 1000,
              seed: int = 0) -> pd.DataFrame:
    """One row per bin: n, ceiling (value, low, high), per head Spearman and median |log error| (value, low, high)."""
    lab = bins(frame, dimension)
    S = np.asarray(samples, dtype=np.float64)
    k = S.shape[1]
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    rng = np.random.default_rng(seed)
    rows = []
    for b in sorted(lab.unique()):
        m = (lab == b).to_numpy()
        idx = _boot_idx(int(m.sum()), n_boot, rng)
        y = frame["y_true"].to_numpy(float)[m]
        Sb = S[m]
        r = np.nanmean([spearman_rows(Sb[idx, a], Sb[idx, c]) for a, c in pairs], axis=0)
        with np.errstate(invalid="ignore"):
            rp = np.where(r > 0, r, np.nan)
            ceil = np.sqrt(k * rp / (1 + (k - 1) * rp))
        row: dict = {"dimension": dimension, "bin": b, "n": int(m.sum())}
        row["ceiling"], row["ceiling_low"], row["ceiling_high"] = _interval(ceil)
        for h in heads:
            p = frame[f"pred:{h}"].to_numpy(float)[m]
            rho = spearman_rows(y[idx], p[idx])
            err = np.abs(np.log1p(np.maximum(p, 0)) - np.log1p(y))
            med = np.median(err[idx], axis=1)
            row[f"{h}:spearman"], row[f"{h}:spearman_low"], row[f"{h}:spearman_high"] = _interval(rho)
            row[f"{h}:log_error"], row[f"{h}:log_error_low"], row[f"{h}:log_error_high"] = _interval(med)
        rows.append(row)
    return pd.DataFrame(rows)


def all_wrong(frame: pd.DataFrame, samples: np.ndarray, heads: Sequence[str], factor: float = 2.0) -> np.ndarray:
    """[n] True where every head's prediction is off by more than `factor`× (|log1p ŷ − log1p y| > log factor)."""
    y = np.log1p(frame["y_true"].to_numpy(float))
    errs = np.stack([np.abs(np.log1p(np.maximum(frame[f"pred:{h}"].to_numpy(float), 0)) - y) for h in heads])
    return np.all(errs > math.log(factor), axis=0)


def noise_table(frame: pd.DataFrame, samples: np.ndarray, heads: Sequence[str], *, factor: float = 2.0,
                n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Prompts every head gets wrong against the rest: n, share with a capped sample, median sample spread
    sd(log1p samples) [95% CI], median standard error of the target, median |log error| over heads, and the share
    whose error (mean over heads) lies within 2 standard errors of their own target."""
    S = np.log1p(np.asarray(samples, dtype=np.float64))
    k = S.shape[1]
    sd = S.std(axis=1, ddof=1)
    se = sd / math.sqrt(k)
    y = np.log1p(frame["y_true"].to_numpy(float))
    err = np.mean([np.abs(np.log1p(np.maximum(frame[f"pred:{h}"].to_numpy(float), 0)) - y) for h in heads], axis=0)
    wrong = all_wrong(frame, samples, heads, factor)
    rng = np.random.default_rng(seed)
    rows = []
    for name, m in ((f"every head off by > {factor:g}×", wrong), ("the rest", ~wrong)):
        n = int(m.sum())
        row: dict = {"group": name, "n": n, "share": n / len(m)}
        if n == 0:
            rows.append(row)
            continue
        idx = _boot_idx(n, n_boot, rng)
        row["capped"] = float((frame["capped_frac"].to_numpy(float)[m] > 0).mean())
        row["spread"], row["spread_low"], row["spread_high"] = _interval(np.median(sd[m][idx], axis=1))
        row["se"] = float(np.median(se[m]))
        row["log_error"] = float(np.median(err[m]))
        row["within_2se"] = float((err[m] <= 2 * se[m]).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def noise_sentence(wrong_n: int, wrong_within_2se: float, rest_n: int, rest_within_2se: float) -> str:
    """What `noise_table` says: how many of the prompts every head gets wrong their own samples' noise could explain
    (error within 2 standard errors of their target), against the rest."""
    if not wrong_n:
        return "No test prompt is missed by every head."
    if not rest_n:
        return "Every head misses every test prompt."
    if math.isnan(wrong_within_2se) or math.isnan(rest_within_2se):
        return "The noise table has no within-2-SE share to compare."
    verdict = ("most of these misses are larger than their own samples' noise explains" if wrong_within_2se < 0.5
               else "their own samples' noise could explain most of these misses")
    return (f"Of the prompts every head gets wrong, {wrong_within_2se:.0%} have an error within 2 standard errors of "
            f"their own target, against {rest_within_2se:.0%} of the rest: {verdict}.")


def domain_mix(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """Per domain: prompts in the mask, the domain's test prompts, and the share."""
    d = frame["domain"].astype(str)
    out = pd.DataFrame({"wrong": d[mask].value_counts(), "test": d.value_counts()}).fillna(0).astype(int)
    return out.assign(share=out["wrong"] / out["test"]).sort_values("share", ascending=False)
