"""The two eval steps as library calls: predictions → results.csv, and results (+ other stages) → tables/plots."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from lengthpred.artefacts import METRICS as METRICS_FILE
from lengthpred.artefacts import SCHED_GAINS, STREAM_CURVES, age_key
from lengthpred.errors import DataError
from lengthpred.eval import plots
from lengthpred.eval.inputs import read_costs, read_curves, read_latencies, read_sched
from lengthpred.eval.predictions import find_predictions, read_predictions, scored_column
from lengthpred.eval.render import Table
from lengthpred.eval.results import (
    CEILING_HEAD,
    RESULT_COLUMNS,
    Provenance,
    ProvenanceOf,
    ceiling_rows,
    check_consistent,
    config_difference,
    provenance_for,
    read_results,
    result_row,
    score_predictions,
    shift_rows,
)
from lengthpred.eval.selection import candidates_table, read_fits, resolve_paired_heads, selection_table
from lengthpred.eval.tables import ONLINE_HEADS, build_tables
from lengthpred.metrics import METRICS, is_undefined, paired_bootstrap
from lengthpred.names import POOLED_DOMAIN, SplitName
from lengthpred.online.plots import adaptation_figures
from lengthpred.targets import reference_samples

log = logging.getLogger(__name__)


def read_reference_samples(path: str | Path) -> dict[str, list[float]]:
    """Per-id sampled lengths from a reference trace (`lengthpred.targets` format: meta line, then rows)."""
    return {i: [float(x) for x in v] for i, v in reference_samples(Path(path)).items()}


def paired_rows(
    df: pd.DataFrame, prov: Provenance, baseline: str, metrics: Sequence[str], *, n_boot: int, seed: int
) -> pd.DataFrame:
    """`<metric>_diff_vs_<baseline>` (with CI) and `…_p` rows for every head sharing a split with baseline."""
    rows = []
    for split, g in sorted(df.groupby("split"), key=lambda kv: kv[0]):
        base = g[g["head"] == baseline].set_index("id").sort_index()
        if base.empty:
            continue
        for head in sorted(set(g["head"]) - {baseline}):
            other = g[g["head"] == head].set_index("id")
            ids = base.index.intersection(other.index)
            if len(ids) < 2:
                continue
            for m in metrics:
                point = METRICS.get(m).rewards  # each head's own median/mean where it records it
                d = paired_bootstrap(
                    base.loc[ids, "y_true"],
                    other.loc[ids, scored_column(other.loc[ids], point)],
                    base.loc[ids, scored_column(base.loc[ids], point)],
                    m,
                    n_boot=n_boot,
                    seed=seed,
                )
                rows.append(
                    result_row(prov, head, split, f"{m}_diff_vs_{baseline}", d.diff, d.ci_low, d.ci_high, d.n)
                )
                rows.append(
                    result_row(prov, head, split, f"{m}_diff_vs_{baseline}_p", d.p_value, None, None, d.n)
                )
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def attach_n_parameters(df: pd.DataFrame, pred_file: Path) -> pd.DataFrame:
    """Add an `n_parameters` column from the run's `metrics.json` beside the predictions file, when it has one:
    `{"head": h, "n_parameters": n}` (scripts/train.py: one head per run), `{"n_parameters": n}` (every head
    of the file) or `{h: {"n_parameters": n}, ...}`."""
    if "n_parameters" in df.columns:
        return df
    path = pred_file.parent / METRICS_FILE
    if not path.is_file():
        return df
    try:
        blob = json.loads(path.read_text())
    except json.JSONDecodeError:
        log.warning("evaluate: %s is not valid JSON; parameter counts skipped", path)
        return df
    if not isinstance(blob, dict):
        return df
    if "n_parameters" in blob:
        counts = (
            {str(blob["head"]): blob["n_parameters"]}
            if "head" in blob
            else dict.fromkeys(df["head"], blob["n_parameters"])
        )
    else:
        counts = {
            h: v["n_parameters"] for h, v in blob.items() if isinstance(v, dict) and "n_parameters" in v
        }
    if not counts:
        return df
    return df.assign(n_parameters=[counts.get(h) for h in df["head"]])


def add_pooled_indomain(df: pd.DataFrame) -> pd.DataFrame:
    """Add `indomain/all/<part>`: each head's in-domain rows of every domain pooled (the headline figure),
    for heads scored on at least two domains of that part."""
    names = [SplitName.try_parse(split) for split in df["split"]]
    mask = [p is not None and p.kind == "indomain" and p.name != POOLED_DOMAIN for p in names]
    ind = df[mask]
    if ind.empty:
        return df
    part = pd.Series([p.part for p, m in zip(names, mask, strict=True) if m], index=ind.index)
    pooled = []
    for (_head, pt), g in ind.groupby([ind["head"], part], sort=True):
        if g["split"].nunique() >= 2 and not g["id"].duplicated().any():
            pooled.append(g.assign(split=str(SplitName.indomain(POOLED_DOMAIN, pt))))
    return pd.concat([df, *pooled], ignore_index=True) if pooled else df


def latest_file_per_group(loaded: Sequence[tuple[Path, pd.DataFrame]]) -> dict[tuple[str, str], Path]:
    """(head, split) → the newest file holding it (`lengthpred.artefacts.age_key`), so a rerun supersedes."""
    latest: dict[tuple[str, str], Path] = {}
    for f, df in sorted(loaded, key=lambda fd: age_key(fd[0])):
        for key in df[["head", "split"]].drop_duplicates().itertuples(index=False, name=None):
            latest[key] = f
    return latest


def check_same_provenance(files: Sequence[tuple[Path, Provenance]]) -> None:
    """Refuse predictions of different models/configs in one results file, naming the files and what differs."""
    if not files:
        return
    f0, p0 = files[0]
    for f, p in files[1:]:
        for key in ("model", "config_hash"):
            if getattr(p, key) != getattr(p0, key):
                diff = config_difference(p0.hashed or {}, p.hashed or {}) if key == "config_hash" else ""
                raise DataError(
                    f"predictions disagree on {key}: {getattr(p0, key)!r} ({f0}) vs {getattr(p, key)!r} ({f})"
                    + (f" [{diff}]" if diff else "")
                    + "; tables compare predictors of one model and config: rerun the stale stage or evaluate "
                    "each run into its own experiment (eval.input_dir=...)"
                )


def evaluate_run(
    root: str | Path,
    provenance_of: ProvenanceOf,
    *,
    metrics: Sequence[str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    paired_baselines: Sequence[str] = ("static",),
    paired_metrics: Sequence[str] = ("spearman",),
    paired_heads: Sequence[str] = (),
    paired_splits: Sequence[str] = ("indomain/all/test",),
    reference: str | Path | None = None,
    samples: Mapping[str, Sequence[float]] | None = None,
    splits_json: str | Path | None = None,
    shift_key: str = "length_wasserstein",
    pool_indomain: bool = True,
) -> pd.DataFrame:
    """Score every predictions file under a run/experiment dir into one tidy results frame. `paired_baselines`
    are compared with the heads of their own file; `paired_heads` with every head of every file, on
    `paired_splits` (heads that share a test set are compared on the same resampled prompts); `auto` among
    `paired_heads` is the head best on validation (lengthpred.eval.selection)."""
    # `auto`: the head best on validation, from the train runs' metrics.json, before any test row is read
    paired_heads = resolve_paired_heads(paired_heads, root)
    files = find_predictions(root)
    if not files:
        raise DataError(f"no predictions.parquet under {root}; run scripts/train.py (or adapt.py) first")
    loaded = [(f, read_predictions(f)) for f in files]
    latest = latest_file_per_group(loaded)
    frames, split_ids, n_samples = [], {}, {}
    kept = []
    for f, df in loaded:
        df = df[[latest[(h, s)] == f for h, s in zip(df["head"], df["split"], strict=True)]]
        if df.empty:
            log.warning("evaluate: %s superseded by newer runs of the same heads and splits; skipped", f)
            continue
        kept.append((f, df, provenance_for(f, Path(root), provenance_of)))
    check_same_provenance([(f, p) for f, _, p in kept])
    prov = None
    across = []
    for f, df, prov in tqdm(kept, desc="evaluate", disable=len(kept) < 2):
        df = attach_n_parameters(df, f)
        if pool_indomain:
            df = add_pooled_indomain(df)
        across.append(df[df["split"].isin(list(paired_splits))])
        scored = score_predictions(
            df, prov, metrics, n_boot=n_boot, seed=seed, confidence=confidence, params=params
        )
        scored["source"] = str(f)
        frames.append(scored)
        for b in paired_baselines:
            pr = paired_rows(df, prov, b, paired_metrics, n_boot=n_boot, seed=seed)
            pr["source"] = str(f)
            frames.append(pr)
        for split, g in df.groupby("split"):
            split_ids.setdefault(split, set()).update(g["id"])
            n_samples[split] = float(g["n_samples"].median())
    assert prov is not None
    if paired_heads:
        both = pd.concat(across, ignore_index=True)
        for b in paired_heads:
            pr = paired_rows(both, prov, b, paired_metrics, n_boot=n_boot, seed=seed)
            pr["source"] = "(paired across heads)"
            frames.append(pr)
    source = "(prompt table lengths)"
    if reference is not None and Path(reference).is_file():
        samples, source = read_reference_samples(reference), str(reference)
    if samples:
        c = ceiling_rows(
            samples, split_ids, prov, k=n_samples, seed=seed, n_boot=n_boot, confidence=confidence
        )
        c["source"] = source
        frames.append(c)
    if splits_json is not None and Path(splits_json).is_file():
        s = shift_rows(json.loads(Path(splits_json).read_text()), prov, key=shift_key)
        s["source"] = str(splits_json)
        frames.append(s)
    out = pd.concat([f for f in frames if len(f)], ignore_index=True)
    check_consistent(out, what="results file")
    return out


def headline(results: pd.DataFrame, metrics: Sequence[str] = ("spearman", "mae")) -> dict[str, float | str]:
    """`<head>/<split>/<metric>` → value for the W&B run summary (undefined values as the string)."""
    r = results[results["metric"].isin(metrics)]
    return {
        f"{h}/{s}/{m}": (str(v) if is_undefined(v) else float(v))
        for h, s, m, v in zip(r["head"], r["split"], r["metric"], r["value"], strict=True)
        if v is not None
    }


@dataclass
class TableOutputs:
    tables: dict[str, Table]
    files: dict[str, dict[str, Path]] = field(default_factory=dict)
    plots: dict[str, Path] = field(default_factory=dict)


def make_tables(
    results_files: Sequence[str | Path],
    out_dir: str | Path,
    *,
    sched: str | Path | None = None,
    latencies: str | Path | None = None,
    curves: Sequence[str | Path] = (),
    costs: str | Path | None = None,
    online_summary: str | Path | None = None,
    predictions_root: str | Path | None = None,
    options: Mapping[str, Any] | None = None,
    plot: bool = True,
) -> TableOutputs:
    """Tables under `out_dir` (T*.md/.tex/.csv) and plots under `out_dir/plots`; inputs that are absent are skipped."""
    results = read_results(results_files)
    check_consistent(results)
    out_dir = Path(out_dir)

    def maybe(p: str | Path | None, reader: Any) -> pd.DataFrame | None:
        return reader(p) if p is not None and Path(p).is_file() else None

    sched_df = maybe(sched, read_sched)
    curve_files = [c for c in curves if Path(c).is_file()]
    online_dir = Path(curve_files[-1]).parent if curve_files else None  # the online stage's run dir
    online_targets = maybe(online_dir / "per_target.csv", pd.read_csv) if online_dir else None
    gains_df = maybe(Path(sched).with_name(SCHED_GAINS), read_sched) if sched is not None else None
    tables = build_tables(
        results,
        sched=sched_df,
        sched_gains=gains_df,
        costs=maybe(costs, read_costs),
        online_summary=maybe(online_summary, pd.read_csv),
        options=options,
        online_targets=online_targets,
    )
    if predictions_root is not None:
        fits = read_fits(predictions_root)
        for sel in (selection_table(fits), candidates_table(fits)):
            if sel is not None:
                tables[sel.key] = sel
    out = TableOutputs(tables, {k: t.write(out_dir) for k, t in tables.items()})
    if not plot:
        return out
    pdir = out_dir / "plots"
    o = dict(options or {})
    heads = sorted(
        h
        for h in results["head"].unique()
        if not h.startswith("_") and h != CEILING_HEAD and not re.match(ONLINE_HEADS, h)
    )
    for h in heads:
        p = plots.heatmap_cross(results, pdir / f"cross_heatmap_{h}.png", h, o.get("t2_metric", "spearman"))
        if p is not None:
            out.plots[f"cross_heatmap_{h}"] = p
    if online_dir is not None and (online_dir / STREAM_CURVES).is_file():
        out.plots.update(adaptation_figures(online_dir, pdir))  # summary over pairs + per-target grid
    elif curve_files:
        p = plots.adaptation_curves(
            read_curves(curve_files), pdir / "adaptation_curves.png", o.get("curve_metric", "test_spearman")
        )
        if p is not None:
            out.plots["adaptation_curves"] = p
    lat = maybe(latencies, read_latencies)
    if lat is not None:
        p = plots.latency_cdfs(lat, pdir / "latency_cdf.png")
        if p is not None:
            out.plots["latency_cdf"] = p
    if predictions_root is not None and Path(predictions_root).exists():
        files = find_predictions(predictions_root)
        if files:
            loaded = [(f, read_predictions(f)) for f in files]
            latest = latest_file_per_group(loaded)
            preds = pd.concat(
                [df[[latest[k] == f for k in zip(df["head"], df["split"], strict=True)]] for f, df in loaded],
                ignore_index=True,
            )
            p = plots.scatter_pred_true(preds, pdir / "pred_vs_true.png")
            if p is not None:
                out.plots["pred_vs_true"] = p
    return out
