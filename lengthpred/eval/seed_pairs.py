"""Heads fitted in separate runs (extra seeds fitted later, a head rerun on its own), compared on their seed
means, paired on the prompts they share.

Each head is given as one or more predictions files (`scripts/train.py`'s `predictions.parquet`); every file
contributes its seed columns (`y_pred_seed<i>`, or `y_pred` when it has none), so a head's seeds may come
from several runs. The rows are those whose `split` matches one of the patterns (fnmatch; `indomain/*/test`
is T1's pooled test set), keyed by prompt id; every head must agree on `y_true`. For each metric, the
difference of seed means against the reference head has a paired percentile bootstrap interval
(`lengthpred.metrics.paired_bootstrap_seeds`): one resample of prompts scores every seed of both heads.
MAE scores each seed's median prediction where every file of the head records it, else every seed's `y_pred`
(one kind per head; the table says which).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.metrics import METRICS, is_undefined, paired_bootstrap_seeds
from lengthpred.seeds import POINT_COLUMNS, SEED_METRICS, seed_column, seed_columns, seed_metric_name, spread

COLUMNS = ["head", "n_seeds", "n", "metric", "scored", "seed_mean", "seed_sd", "diff_vs_reference", "ci_low", "ci_high",
           "p_value"]


def _rows(frame: pd.DataFrame, head: str, splits: Sequence[str]) -> pd.DataFrame:
    if "head" in frame.columns and frame["head"].nunique() > 1:
        frame = frame[frame["head"] == head].dropna(axis=1, how="all")  # another head's seed columns
    keep = frame["split"].astype(str).map(lambda s: any(fnmatch.fnmatch(s, p) for p in splits))
    rows = frame[keep]
    if rows.empty:
        raise DataError(f"{head}: no rows whose split matches {list(splits)} (splits there: "
                        f"{sorted(frame['split'].astype(str).unique())[:6]})")
    if rows["id"].duplicated().any():
        raise DataError(f"{head}: a prompt id appears twice among splits {list(splits)}; pick one split pattern")
    return rows.set_index("id")


def _seed_columns(rows: pd.DataFrame) -> list[str]:
    return seed_columns(rows.columns) or ["y_pred"]


def _point_columns(rows: pd.DataFrame, point: str) -> list[str]:
    n = len(seed_columns(rows.columns))
    return [seed_column(i, point) for i in range(n)] if n else [POINT_COLUMNS[point]]


def _has(rows: pd.DataFrame, cols: list[str]) -> bool:
    return all(c in rows.columns and np.isfinite(rows[c].to_numpy(dtype=np.float64)).all() for c in cols)


def _head_columns(rs: Sequence[pd.DataFrame], point: str | None) -> tuple[list[list[str]], str]:
    """Per file, the columns that are this head's seeds for a metric rewarding `point`, and which prediction
    they are: `point`'s (median/mean) when every file records it for every seed, else every file's plain
    seed columns (`y_pred` where a file has none); one kind per head, never a mix."""
    if point is not None and all(_has(r, _point_columns(r, point)) for r in rs):
        return [_point_columns(r, point) for r in rs], point
    return [_seed_columns(r) for r in rs], "y_pred"


def _nan(v: object) -> float:
    return float("nan") if is_undefined(v) else float(v)  # type: ignore[arg-type]


def _value(metric: str, y: np.ndarray, p: np.ndarray) -> float:
    return _nan(METRICS.get(metric)(y, p))


def compare_seed_means(heads: Mapping[str, Sequence[pd.DataFrame]], reference: str, splits: Sequence[str],
                       metrics: Sequence[str] = ("spearman", "mae"), *, n_boot: int = 1000, seed: int = 0,
                       confidence: float = 0.95) -> pd.DataFrame:
    """One row per head × metric (COLUMNS): seed mean ± sd over every seed of the head's files and, but for
    the reference, the paired difference of seed means with its interval and one-sided p."""
    if reference not in heads:
        raise DataError(f"reference head {reference!r} is not among the heads {sorted(heads)}")
    rows = {h: [_rows(f, h, splits) for f in frames] for h, frames in heads.items()}
    ids = sorted(set.intersection(*(set(r.index) for rs in rows.values() for r in rs)))
    if len(ids) < 2:
        raise DataError(f"the heads share {len(ids)} prompt(s) on splits {list(splits)}: nothing to pair")
    y = rows[reference][0].loc[ids, "y_true"].to_numpy(dtype=np.float64)
    for h, rs in rows.items():
        for r in rs:
            if not np.allclose(r.loc[ids, "y_true"].to_numpy(dtype=np.float64), y):
                raise DataError(f"{h}: y_true differs from {reference}'s on the shared prompts (another trace?)")
    out = []
    for metric in metrics:
        point = METRICS.get(metric).rewards
        preds, scored = {}, {}
        for h, rs in rows.items():
            cols, scored[h] = _head_columns(rs, point)
            preds[h] = [r.loc[ids, c].to_numpy(dtype=np.float64) for r, cs in zip(rs, cols, strict=True) for c in cs]
        for h, ps in preds.items():
            s = spread([_value(metric, y, p) for p in ps])
            row = {"head": h, "n_seeds": len(ps), "n": len(ids), "metric": metric, "scored": scored[h],
                   "seed_mean": s.mean, "seed_sd": s.sd}
            if h != reference:
                d = paired_bootstrap_seeds(y, ps, preds[reference], metric, n_boot=n_boot, seed=seed,
                                           confidence=confidence)
                row |= {k: _nan(v) for k, v in (("diff_vs_reference", d.diff), ("ci_low", d.ci_low),
                                                ("ci_high", d.ci_high), ("p_value", d.p_value))}
            out.append(row)
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def _fmt(x: object, digits: int) -> str:
    return "" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{float(x):.{digits}f}"


def seed_pairs_markdown(df: pd.DataFrame, reference: str) -> str:
    """The comparison as a Markdown table, one row per head and metric."""
    lines = [f"| head | seeds | metric (prediction scored) | seed mean ± sd | difference vs {reference} [95% CI] | "
             "p (one-sided) |", "|---|---:|---|---:|---:|---:|"]
    for r in df.itertuples():
        digits = 3 if r.metric == "spearman" else 1
        sd = f" ± {_fmt(r.seed_sd, digits)}" if np.isfinite(r.seed_sd) else ""
        mean = _fmt(r.seed_mean, digits) or "undefined"
        diff = ("(reference)" if r.head == reference else "undefined" if not np.isfinite(r.diff_vs_reference)
                else f"{_fmt(r.diff_vs_reference, digits)} [{_fmt(r.ci_low, digits)}, {_fmt(r.ci_high, digits)}]")
        lines.append(f"| {r.head} | {r.n_seeds} | {r.metric} ({r.scored}) | {mean}{sd} | {diff} | "
                     f"{_fmt(r.p_value, 3)} |")
    return "\n".join(lines) + "\n"


def _is_seed_column(column: str) -> bool:
    return bool(seed_columns([column]) or any(seed_columns([column], p) for p in POINT_COLUMNS))


def merge_seed_runs(frames: Sequence[pd.DataFrame], head: str) -> pd.DataFrame:
    """One predictions frame of `head` from runs that fitted it one seed (or several) each, as one run over every
    seed would have written it: the first run's rows and columns (its `y_pred` and points are the first seed's),
    then every run's seeds, in the order given, as consecutive seed columns (`y_pred_seed<i>` and its points).
    Rows are matched on (split, id); every run must hold the same rows with the same `y_true`."""
    if not frames:
        raise DataError("no runs to merge")
    runs = []
    for k, f in enumerate(frames, 1):
        if "head" in f.columns:
            f = f[f["head"] == head]
        if f.empty:
            raise DataError(f"run {k}: no rows of head {head!r}")
        f = f.set_index(["split", "id"])
        if f.index.duplicated().any():
            raise DataError(f"run {k}: a (split, id) appears twice; give each run's own predictions file")
        runs.append(f)
    base = runs[0]
    out = base[[c for c in base.columns if not _is_seed_column(c)]].copy()
    i = 0
    for k, f in enumerate(runs, 1):
        if len(f.index.symmetric_difference(base.index)):
            raise DataError(f"run {k}: its rows differ from the first run's "
                            f"({len(f.index.symmetric_difference(base.index))} (split, id) pairs in only one)")
        f = f.loc[base.index]
        if not np.allclose(f["y_true"].to_numpy(np.float64), base["y_true"].to_numpy(np.float64)):
            raise DataError(f"run {k}: y_true differs from the first run's (another trace or split?)")
        n = len(seed_columns(f.columns))
        for j in range(n or 1):
            out[seed_column(i)] = f[seed_column(j) if n else "y_pred"].to_numpy(np.float64)
            for point, plain in POINT_COLUMNS.items():
                src = seed_column(j, point) if n else plain
                if src in f.columns:
                    out[seed_column(i, point)] = f[src].to_numpy(np.float64)
            i += 1
    return out.reset_index()


_SCORES = ("spearman", "kendall", "mae", "mae_mean")  # a one-seed metrics.json's test scores (lengthpred.metrics.score)
# what every merged run must share: the head, what it read and was scored on, and its search (each seed's own seed aside)
_SAME = ("head", "model", "data", "experiment", "layer", "pooling", "feature", "n_train", "n_val", "n_test")
_SAME_SEARCH = ("protocol", "budget", "space", "subsample")


def _seed_entries(blob: Mapping[str, Any]) -> list[dict[str, Any]]:
    if blob.get("seeds"):
        return [dict(s) for s in blob["seeds"]]
    return [{"random_state": (blob.get("params") or {}).get("random_state"),
             **{k: blob[k] for k in _SCORES if k in blob}, "val_spearman": blob.get("val_spearman"),
             "selected": blob.get("selected"), "within_bin": blob.get("within_bin"),
             "fit_seconds": blob.get("fit_seconds")}]


def _differences(blob: Mapping[str, Any], first: Mapping[str, Any]) -> list[str]:
    out = [key for key in _SAME if blob.get(key) != first.get(key)]
    a, b = blob.get("search") or {}, first.get("search") or {}
    return out + [f"search.{key}" for key in _SAME_SEARCH if a.get(key) != b.get(key)]


def merge_seed_metrics(blobs: Sequence[Mapping[str, Any]], head: str | None = None) -> dict[str, Any]:
    """The metrics.json of the runs `merge_seed_runs` joins (same order), shaped as one run over every seed writes
    it: the first run's record (its head is the one kept: its `selected`, `params`, `val_spearman`), every run's
    seeds under `seeds` with their mean ± sd, every run's search candidates (each tagged with its seed), and
    `n_parameters` only when every run's head has the same size (else None, where one run over every seed would
    write the first seed's: no single count describes seeds that chose different settings). Runs that differ in
    head, model, data, feature, split sizes or search budget, or repeat a seed, are refused.
    `eval.paired.heads=[auto]` reads it like any train run's."""
    if not blobs:
        raise DataError("no runs to merge")
    for k, b in enumerate(blobs, 1):
        if not isinstance(b, Mapping):
            raise DataError(f"run {k}: its metrics.json is not a JSON object")
    first = blobs[0]
    if head is not None and first.get("head") != head:
        raise DataError(f"run 1: its metrics.json is of head {first.get('head')!r}, not {head!r}")
    for k, b in enumerate(blobs[1:], 2):
        differ = _differences(b, first)
        if differ:
            raise DataError(f"run {k}: its metrics.json differs from the first run's in {', '.join(differ)}")
    per_seed = [s for b in blobs for s in _seed_entries(b)]
    states = [s.get("random_state") for s in per_seed]
    repeated = sorted({str(r) for r in states if states.count(r) > 1})
    if repeated:
        raise DataError(f"seed {', '.join(repeated)} appears in more than one run (the same run given twice?)")
    out = {k: v for k, v in first.items() if k not in ("seeds", "n_seeds", "fit_seconds_seeds", "per_domain")}
    out |= {"n_seeds": len(per_seed), "seeds": per_seed, "merged_runs": len(blobs),
            "candidates": [c for b in blobs for c in b.get("candidates") or []]}
    for m in SEED_METRICS:
        sp = spread([s.get(m) for s in per_seed])
        out[seed_metric_name(m, "mean")] = sp.mean if math.isfinite(sp.mean) else None
        out[seed_metric_name(m, "sd")] = sp.sd if math.isfinite(sp.sd) else None
    out["fit_seconds_seeds"] = round(sum(float(s.get("fit_seconds") or 0.0) for s in per_seed), 3)
    if len({b.get("n_parameters") for b in blobs}) > 1:
        out["n_parameters"] = None
    return out
