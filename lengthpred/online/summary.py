"""Per-target summary of the adaptation runs, with a prompt bootstrap (the T3 table's input).

The cross-domain pairs that share a target domain share its test prompts and its stream, so they are not
independent evidence (AUDIT.md "Non-independent comparisons"): the unit is the target. For each target,
a Spearman difference (head − baseline) is averaged over its pairs and over the stream seeds
(`stream_seed`: each seed is one arrival order and one draw of revealed samples). Its interval combines
both sources of randomness: each bootstrap replicate resamples that target's prompts (the same resample
for every pair and seed of the target) and, independently, the seeds (with replacement), and averages
over the resampled seeds. The "all" row averages the targets; its interval resamples every target's
prompts and seeds independently (stratified).
Differences are absolute: a relative gain off a near-zero base says nothing.

Columns (one row per target, then `all`): target, n_pairs, n_seeds, n_test, n_stream, n_val, shift_mean/min/max
(served-length shift, `lengthpred.online.labels`), load, labels_seen_mean/median, labels_seen_ge10
(share of predictions made with ≥ 10 labels seen), in_flight_mean, forgetting (λ chosen on validation:
`value (pairs)`), then per compared head prefix p: p_test_spearman, p_test_delta (+ _lo, _hi),
p_stream_spearman, p_stream_delta (+ _lo, _hi), p_test_delta_seed_sd and p_stream_delta_seed_sd (sd over
seeds of the seed's pair-averaged delta; for `all`, of the target-averaged one), and base_test_spearman,
base_stream_spearman. `forgetting` counts (pair, seed) choices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.metrics import spearman_rows

ALL = "all"


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


SEED = "stream_seed"


def _boot_deltas(
    df: pd.DataFrame, head: str, base: str, n_boot: int, rng: np.random.Generator
) -> tuple[float, float, float, np.ndarray, np.ndarray]:
    """Seed-averaged means over pairs of the head Spearman, the base Spearman and their delta; the per-seed
    deltas [S]; and bootstrap deltas [n_boot].

    Two sources of randomness: the target's prompts and the stream (`stream_seed`: arrival order and
    revealed samples; a frame without that column is one seed). Each replicate resamples the prompts
    (the same resample for every pair and seed: the prompt set is the same) and, independently, S seeds
    with replacement, and averages the delta over the resampled seeds, so the interval covers both.
    """
    frames = [g for _, g in df.groupby(SEED, sort=True)] if SEED in df.columns else [df]
    ids = None
    h_s, b_s, d_s, D = [], [], [], []
    idx = None
    for g in frames:
        y, preds = _aligned(g, [head, base])
        g_ids = sorted(g["id"].astype(str).unique())
        if ids is None:
            ids = g_ids
            n = len(y)
            idx = rng.integers(0, n, size=(n_boot, n)) if n_boot > 0 else np.empty((0, n), dtype=int)
        elif g_ids != ids:
            raise DataError("the stream seeds of a target do not share its prompt set")
        pairs = sorted(set(preds[head]) & set(preds[base]))
        if not pairs:
            raise DataError(f"no pair has both {head!r} and {base!r}")
        full = np.arange(len(y))[None, :]
        r_head = np.array([spearman_rows(y[full], preds[head][q][full])[0] for q in pairs])
        r_base = np.array([spearman_rows(y[full], preds[base][q][full])[0] for q in pairs])
        h_s.append(np.nanmean(r_head))
        b_s.append(np.nanmean(r_base))
        d_s.append(np.nanmean(r_head - r_base))
        if len(idx):
            D.append(
                np.nanmean(
                    [
                        spearman_rows(y[idx], preds[head][q][idx])
                        - spearman_rows(y[idx], preds[base][q][idx])
                        for q in pairs
                    ],
                    axis=0,
                )
            )
    per_seed = np.asarray(d_s, dtype=np.float64)
    boot = np.zeros(len(idx))
    if len(idx):
        Dm = np.asarray(D)  # [S, n_boot]: the delta of each seed on each prompt resample
        S = len(Dm)
        pick = rng.integers(0, S, size=(len(idx), S))  # seeds resampled with replacement per replicate
        with np.errstate(invalid="ignore"):
            boot = np.nanmean(Dm[pick, np.arange(len(idx))[:, None]], axis=1)
    return float(np.nanmean(h_s)), float(np.nanmean(b_s)), float(np.nanmean(per_seed)), per_seed, boot


def _seed_sd(per_seed: np.ndarray) -> float:
    v = per_seed[np.isfinite(per_seed)]
    return float(np.std(v, ddof=1)) if v.size >= 2 else float("nan")


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

    `test`: pair, target, head, id, y_true, y_pred (end-of-stream predictions on the target test set),
    optionally stream_seed (one block per seed; every frame then carries it, `pairs` one row per pair and seed);
    `stream`: the same plus is_val, labels_seen, in_flight (at-arrival predictions, y_true = the revealed
    length; validation requests are left out of the stream scores); `pairs`: pair, target, shift, load,
    forgetting (λ chosen on validation).
    """
    rng = np.random.default_rng(seed)
    stream_rep = stream[~stream["is_val"].astype(bool)]
    rows, boots, seeds = [], {}, {}
    n_seeds = int(test[SEED].nunique()) if SEED in test.columns else 1
    for tgt in sorted(pairs["target"].unique()):
        pm = pairs[pairs["target"] == tgt]
        te, st = test[test["target"] == tgt], stream_rep[stream_rep["target"] == tgt]
        seen = stream[(stream["target"] == tgt) & (stream["head"] == baseline)]
        row = {
            "target": tgt,
            "n_pairs": int(pm["pair"].nunique()),
            "n_seeds": n_seeds,
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
                h, b, d, per_seed, boot = _boot_deltas(frame, head, baseline, n_boot, rng)
                lo, hi = _interval(boot, confidence)
                row.update(
                    {
                        f"base_{part}_spearman": b,
                        f"{prefix}_{part}_spearman": h,
                        f"{prefix}_{part}_delta": d,
                        f"{prefix}_{part}_delta_lo": lo,
                        f"{prefix}_{part}_delta_hi": hi,
                        f"{prefix}_{part}_delta_seed_sd": _seed_sd(per_seed),
                    }
                )
                boots[(tgt, prefix, part)] = boot
                seeds[(tgt, prefix, part)] = per_seed
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    per = pd.DataFrame(rows)
    seen_all = stream[stream["head"] == baseline]
    total = {
        "target": ALL,
        "n_pairs": int(per["n_pairs"].sum()),
        "n_seeds": n_seeds,
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
            # sd over seeds of the target-averaged delta (seed s of every target; targets' streams differ)
            per_seed = [seeds[(t, prefix, part)] for t in per["target"]]
            same = len({len(v) for v in per_seed}) == 1
            total[f"{prefix}_{part}_delta_seed_sd"] = (
                _seed_sd(np.nanmean(np.array(per_seed), axis=0)) if per_seed and same else float("nan")
            )
    return pd.concat([per, pd.DataFrame([total])], ignore_index=True)
