"""Per-target summary of the adaptation runs, with a prompt bootstrap (the T3 table's input).

The cross-domain pairs that share a target domain share its test prompts and its stream, so they are not
independent evidence (AUDIT.md "Non-independent comparisons"): the unit is the target. For each target,
a Spearman difference (head − baseline) is averaged over its pairs, and its interval comes from
resampling that target's prompts (the same resample for every pair of the target). The "all" row
averages the targets; its interval resamples every target's prompts independently (stratified).
Differences are absolute: a relative gain off a near-zero base says nothing.

Columns (one row per target, then `all`): target, n_pairs, n_test, n_stream, n_val, shift_mean/min/max
(served-length shift, `lengthpred.online.labels`), load, labels_seen_mean/median, labels_seen_ge10
(share of predictions made with ≥ 10 labels seen), in_flight_mean, forgetting (λ chosen on validation:
`value (pairs)`), then per compared head prefix p: p_test_spearman, p_test_delta (+ _lo, _hi),
p_stream_spearman, p_stream_delta (+ _lo, _hi), and base_test_spearman, base_stream_spearman.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from lengthpred.errors import DataError

ALL = "all"


def spearman_rows(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Spearman of each row of y [B, n] with the same row of p [B, n]; NaN where a row is constant."""
    ry, rp = rankdata(y, axis=1), rankdata(p, axis=1)
    ry -= ry.mean(axis=1, keepdims=True)
    rp -= rp.mean(axis=1, keepdims=True)
    den = np.sqrt((ry**2).sum(axis=1) * (rp**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ry * rp).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def _aligned(df: pd.DataFrame, heads: Sequence[str]) -> tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]:
    """y [n] over the target's prompts (sorted ids) and, per head, per pair, its predictions [n]."""
    ids = sorted(df["id"].astype(str).unique())
    y = None
    preds: dict[str, dict[str, np.ndarray]] = {h: {} for h in heads}
    for (pair, head), g in df[df["head"].isin(heads)].groupby(["pair", "head"], sort=True):
        g = g.assign(id=g["id"].astype(str)).set_index("id")
        if sorted(g.index) != ids:
            raise DataError(f"pair {pair}, head {head}: not the target's full prompt set")
        yy = g.loc[ids, "y_true"].to_numpy(dtype=np.float64)
        if y is None:
            y = yy
        elif not np.array_equal(y, yy):
            raise DataError(f"pair {pair}: the target's lengths differ between pairs (not one shared stream)")
        preds[head][str(pair)] = g.loc[ids, "y_pred"].to_numpy(dtype=np.float64)
    if y is None:
        raise DataError("no predictions for the summary's heads")
    return y, preds


def _boot_deltas(
    df: pd.DataFrame, head: str, base: str, n_boot: int, rng: np.random.Generator
) -> tuple[float, float, float, np.ndarray]:
    """(mean over pairs of head Spearman, of base Spearman, of the delta; bootstrap deltas [n_boot])."""
    y, preds = _aligned(df, [head, base])
    pairs = sorted(set(preds[head]) & set(preds[base]))
    if not pairs:
        raise DataError(f"no pair has both {head!r} and {base!r}")
    n = len(y)
    full = np.arange(n)[None, :]
    idx = rng.integers(0, n, size=(n_boot, n)) if n_boot > 0 else np.empty((0, n), dtype=int)

    def rho(p: np.ndarray, ix: np.ndarray) -> np.ndarray:
        return spearman_rows(y[ix], p[ix])

    r_head = np.array([rho(preds[head][q], full)[0] for q in pairs])
    r_base = np.array([rho(preds[base][q], full)[0] for q in pairs])
    boot = np.zeros(len(idx))
    if len(idx):
        boot = np.nanmean([rho(preds[head][q], idx) - rho(preds[base][q], idx) for q in pairs], axis=0)
    return float(np.nanmean(r_head)), float(np.nanmean(r_base)), float(np.nanmean(r_head - r_base)), boot


def _interval(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    b = boot[np.isfinite(boot)]
    if b.size < 2:
        return float("nan"), float("nan")
    a = (1.0 - confidence) / 2
    return float(np.quantile(b, a)), float(np.quantile(b, 1 - a))


def _lambda_text(values: Sequence[float]) -> str:
    c = Counter(float(v) for v in values if np.isfinite(v))
    return ", ".join(f"{lam:g} ({k})" for lam, k in sorted(c.items(), key=lambda kv: -kv[0]))


def per_target_summary(
    test: pd.DataFrame,
    stream: pd.DataFrame,
    pairs: pd.DataFrame,
    heads: Mapping[str, str],
    *,
    baseline: str = "static",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Per target and overall: Δ Spearman of each `heads` entry (prefix → head) over `baseline`.

    `test`: pair, target, head, id, y_true, y_pred (end-of-stream predictions on the target test set);
    `stream`: the same plus is_val, labels_seen, in_flight (at-arrival predictions, y_true = the revealed
    length; validation requests are left out of the stream scores); `pairs`: pair, target, shift, load,
    forgetting (λ chosen on validation).
    """
    rng = np.random.default_rng(seed)
    stream_rep = stream[~stream["is_val"].astype(bool)]
    rows, boots = [], {}
    for tgt in sorted(pairs["target"].unique()):
        pm = pairs[pairs["target"] == tgt]
        te, st = test[test["target"] == tgt], stream_rep[stream_rep["target"] == tgt]
        seen = stream[(stream["target"] == tgt) & (stream["head"] == baseline)]
        row = {
            "target": tgt,
            "n_pairs": len(pm),
            "n_test": int(te["id"].nunique()),
            "n_stream": int(st["id"].nunique()),
            "n_val": int(stream[(stream["target"] == tgt) & stream["is_val"].astype(bool)]["id"].nunique()),
            "shift_mean": float(pm["shift"].mean()),
            "shift_min": float(pm["shift"].min()),
            "shift_max": float(pm["shift"].max()),
            "load": float(pm["load"].mean()),
            "labels_seen_mean": float(seen["labels_seen"].mean()),
            "labels_seen_median": float(seen["labels_seen"].median()),
            "labels_seen_ge10": float((seen["labels_seen"] >= 10).mean()),
            "in_flight_mean": float(seen["in_flight"].mean()),
            "forgetting": _lambda_text(pm["forgetting"]),
        }
        for prefix, head in heads.items():
            for part, frame in (("test", te), ("stream", st)):
                h, b, d, boot = _boot_deltas(frame, head, baseline, n_boot, rng)
                lo, hi = _interval(boot, confidence)
                row.update(
                    {
                        f"base_{part}_spearman": b,
                        f"{prefix}_{part}_spearman": h,
                        f"{prefix}_{part}_delta": d,
                        f"{prefix}_{part}_delta_lo": lo,
                        f"{prefix}_{part}_delta_hi": hi,
                    }
                )
                boots[(tgt, prefix, part)] = boot
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    per = pd.DataFrame(rows)
    seen_all = stream[stream["head"] == baseline]
    total = {
        "target": ALL,
        "n_pairs": int(per["n_pairs"].sum()),
        "n_test": int(per["n_test"].sum()),
        "n_stream": int(per["n_stream"].sum()),
        "n_val": int(per["n_val"].sum()),
        "shift_mean": float(pairs["shift"].mean()),
        "shift_min": float(pairs["shift"].min()),
        "shift_max": float(pairs["shift"].max()),
        "load": float(pairs["load"].mean()),
        "labels_seen_mean": float(seen_all["labels_seen"].mean()),
        "labels_seen_median": float(seen_all["labels_seen"].median()),
        "labels_seen_ge10": float((seen_all["labels_seen"] >= 10).mean()),
        "in_flight_mean": float(seen_all["in_flight"].mean()),
        "forgetting": _lambda_text(pairs["forgetting"]),
    }
    for prefix in heads:
        for part in ("test", "stream"):
            for col in (f"base_{part}_spearman", f"{prefix}_{part}_spearman", f"{prefix}_{part}_delta"):
                total[col] = float(per[col].mean())
            stacked = np.array([boots[(t, prefix, part)] for t in per["target"]])
            lo, hi = _interval(np.nanmean(stacked, axis=0) if stacked.size else stacked, confidence)
            total[f"{prefix}_{part}_delta_lo"], total[f"{prefix}_{part}_delta_hi"] = lo, hi
    return pd.concat([per, pd.DataFrame([total])], ignore_index=True)
