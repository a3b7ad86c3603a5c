"""Tidy results: one row per (head, split, metric) with a bootstrap CI, plus provenance.

`results.csv` columns: experiment, model, data, head, split, metric, value, ci_low, ci_high, n,
config_hash. A value is a number, `undefined` (the metric does not exist on these data, e.g. the
Spearman of a constant predictor) or empty (no CI computed for that row, e.g. a parameter count).
Special rows: head `noise_ceiling` (metrics `ceiling_*` per split: an *estimate* of the best Spearman
any predictor of the expected length could reach, with its own bootstrap CI) and head `_split` (metric
`shift`: the split's distribution shift from splits.json, read by T3). Heads fitted over several seeds
(lengthpred.seeds) also get `<metric>_seed_mean`, `<metric>_seed_sd` and `n_seeds` rows (no CI).

Which prediction a metric scores: the point it rewards (`Metric.rewards`) where the predictions file records
it (`mae` on `y_pred_median`, `rmse` on `y_pred_mean`; lengthpred.eval.predictions.scored_column), `y_pred`
otherwise and for every rank metric; `mae_mean` is the MAE of `y_pred_mean`, a row only for heads that
record a mean. All of a group's metrics use the same bootstrap resamples whichever column they read.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.eval.predictions import scored_column
from lengthpred.integrity import temp_path
from lengthpred.metrics import METRICS, UNDEFINED, MetricValue, evaluate, is_undefined, noise_ceiling
from lengthpred.names import SplitName
from lengthpred.seeds import POINT_COLUMNS, SEED_METRICS, seed_columns, seed_metric_name, spread

RESULT_COLUMNS = (
    "experiment",
    "model",
    "data",
    "head",
    "split",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "config_hash",
)
MAE_MEAN = "mae_mean"  # MAE of the mean prediction (`mae` scores the median)
CEILING_HEAD = "noise_ceiling"
SPLIT_HEAD = "_split"
# config groups that decide what the targets are; heads and features may differ within one table
HASHED_GROUPS = ("model", "data", "generate")
_PATHLIKE = ("dir", "root", "path", "file")
# keys that change how a stage runs, not what the targets are
_OPERATIONAL = {"batch_size", "backend", "limit", "export_reference", "progress", "num_workers", "device"}


@dataclass(frozen=True)
class Provenance:
    """Where a predictions file came from: rows of one table must share model and config_hash."""

    experiment: str
    model: str
    data: str
    config_hash: str
    hashed: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)  # what the hash covers


def _strip_paths(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {
            k: _strip_paths(v)
            for k, v in sorted(node.items())
            if not any(p in k for p in _PATHLIKE) and k not in _OPERATIONAL
        }
    if isinstance(node, list):
        return [_strip_paths(v) for v in node]
    return node


def hashed_part(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The model/data/generate groups of a plain (unresolved) config mapping without path-like or operational
    keys (machine-independent); `lengthpred.stages.provenance` turns a composed config into one."""
    return _strip_paths({g: cfg[g] for g in HASHED_GROUPS if g in cfg})


def config_hash(cfg: Mapping[str, Any]) -> str:
    """12 hex chars over `hashed_part(cfg)`."""
    blob = json.dumps(hashed_part(cfg), sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): node}


def config_difference(a: Mapping[str, Any], b: Mapping[str, Any], limit: int = 4) -> str:
    """`generate.temperature: 0.7 vs 1.0; …` for the hashed keys that differ."""
    fa, fb = _flatten(a), _flatten(b)
    keys = sorted(k for k in set(fa) | set(fb) if fa.get(k, "<absent>") != fb.get(k, "<absent>"))
    text = "; ".join(f"{k}: {fa.get(k, '<absent>')!r} vs {fb.get(k, '<absent>')!r}" for k in keys[:limit])
    return text + (f"; +{len(keys) - limit} more" if len(keys) > limit else "")


def provenance_from(experiment: str, model: str, data: str, groups: Mapping[str, Any]) -> Provenance:
    """The provenance of a run: its names and its plain, unresolved config groups (`hashed_part`)."""
    return Provenance(experiment=experiment, model=model, data=data, config_hash=config_hash(groups),
                      hashed=hashed_part(groups))


# a run's saved config file → its provenance; None → the calling stage's own config's
# (`lengthpred.stages.provenance.provenance_of` builds one, so this package never reads a Hydra config)
ProvenanceOf = Callable[[Path | None], Provenance]


def run_config_file(pred_file: Path, root: Path) -> Path | None:
    """The config of the run that wrote `pred_file`: the nearest `.hydra/config.yaml` up to `root`, or None."""
    root = root.resolve()
    d = pred_file.resolve().parent
    while True:
        c = d / ".hydra" / "config.yaml"
        if c.is_file():
            return c
        if d == root or d.parent == d or root not in d.parents:
            return None
        d = d.parent


def provenance_for(pred_file: Path, root: Path, provenance_of: ProvenanceOf) -> Provenance:
    """The provenance of the run that wrote `pred_file` (`run_config_file`), else the caller's own."""
    return provenance_of(run_config_file(pred_file, root))


def result_row(
    prov: Provenance, head: str, split: str, metric: str, value: Any, lo: Any, hi: Any, n: int
) -> dict:
    return {
        "experiment": prov.experiment,
        "model": prov.model,
        "data": prov.data,
        "head": head,
        "split": split,
        "metric": metric,
        "value": value,
        "ci_low": lo,
        "ci_high": hi,
        "n": int(n),
        "config_hash": prov.config_hash,
    }


def score_predictions(
    df: pd.DataFrame,
    prov: Provenance,
    metrics: Sequence[str] | None = None,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """Score every (head, split) group of a predictions frame; rows sorted, ids sorted within a group so
    the same seed resamples the same prompts for every head (a paired comparison)."""
    rows = []
    for (head, split), g in sorted(df.groupby(["head", "split"], sort=True), key=lambda kv: kv[0]):
        g = g.sort_values("id", kind="stable")
        kw = {"n_boot": n_boot, "seed": seed, "confidence": confidence, "params": params}
        for name, e in point_estimates(g, metrics, **kw):
            rows.append(result_row(prov, head, split, name, e.value, e.ci_low, e.ci_high, e.n))
        rows.append(
            result_row(prov, head, split, "capped_frac", float(g["capped_frac"].mean()), None, None, len(g))
        )
        rows.append(
            result_row(prov, head, split, "n_samples", float(g["n_samples"].mean()), None, None, len(g))
        )
        rows += seed_rows(g, prov, head, split)
        if "n_parameters" in g.columns and pd.notna(g["n_parameters"].iloc[0]):
            rows.append(
                result_row(
                    prov, head, split, "n_parameters", float(g["n_parameters"].iloc[0]), None, None, len(g)
                )
            )
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def point_estimates(g: pd.DataFrame, metrics: Sequence[str] | None, **kw: Any) -> list[tuple[str, Any]]:
    """(name, Estimate) of every metric on the column it scores (module docstring), in `metrics` order,
    then `mae_mean` where `mae` is asked for and the group records a mean; one seed, so one set of resamples."""
    names = list(metrics) if metrics is not None else METRICS.names()
    by_column: dict[str, list[str]] = {}
    for name in names:
        by_column.setdefault(scored_column(g, METRICS.get(name).rewards), []).append(name)
    ests = {}
    for col, group in by_column.items():
        ests |= evaluate(g["y_true"], g[col], group, **kw)
    out = [(name, ests[name]) for name in names]
    mean_col = POINT_COLUMNS["mean"]
    if "mae" in names and scored_column(g, "mean") == mean_col:
        out.append((MAE_MEAN, evaluate(g["y_true"], g[mean_col], ["mae"], **kw)["mae"]))
    return out


def seed_rows(
    g: pd.DataFrame, prov: Provenance, head: str, split: str, metrics: Sequence[str] = SEED_METRICS
) -> list[dict]:
    """Mean and sd over seeds of each metric, from a (head, split) group's `y_pred_seed<i>` columns;
    none unless at least two seed columns are complete for the group (cross pairs carry no seeds)."""
    cols = [c for c in seed_columns(g.columns) if g[c].notna().all()]
    if len(cols) < 2:
        return []
    rows = []
    for name in metrics:
        point = METRICS.get(name).rewards
        # the seeds' own median/mean columns where every seed recorded that point, as `scored_column`
        own = [c for c in seed_columns(g.columns, point) if g[c].notna().all()] if point else []
        values = [METRICS.get(name)(g["y_true"], g[c]) for c in (own if len(own) == len(cols) else cols)]
        sp = spread([None if is_undefined(v) else float(v) for v in values])
        for stat, v in (("mean", sp.mean), ("sd", sp.sd)):
            value = UNDEFINED if math.isnan(v) else v
            rows.append(result_row(prov, head, split, seed_metric_name(name, stat), value, None, None, len(g)))
    rows.append(result_row(prov, head, split, "n_seeds", float(len(cols)), None, None, len(g)))
    return rows


def ceiling_rows(
    samples: Mapping[str, Sequence[float]],
    split_ids: Mapping[str, Iterable[str]],
    prov: Provenance,
    *,
    k: Mapping[str, float] | None = None,
    seed: int = 0,
    n_boot: int = 0,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Noise-ceiling rows (head `noise_ceiling`) for each split from per-id sampled lengths."""
    rows = []
    memo: dict[tuple, Any] = {}
    for split in sorted(split_ids):
        ids = sorted(set(split_ids[split]))
        lists = [samples[i] for i in ids if i in samples]
        key = (tuple(ids), (k or {}).get(split))  # cross splits reuse their target's test ids: compute once
        if key not in memo:
            memo[key] = noise_ceiling(lists, k=key[1], seed=seed, n_boot=n_boot, confidence=confidence)
        nc = memo[key]
        for name, v in nc.as_dict().items():
            lo, hi = nc.ci.get(name, (None, None))
            rows.append(result_row(prov, CEILING_HEAD, split, name, v, lo, hi, nc.n_prompts))
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def shift_rows(splits: Mapping[str, Any], prov: Provenance, key: str = "length_wasserstein") -> pd.DataFrame:
    """`shift` rows (head `_split`) for every cross-domain pair of a parsed splits.json."""
    rows = []
    for pair in splits.get("cross", []) or []:
        value = (pair.get("shift") or {}).get(key)
        if value is None:
            continue
        for part in ("test", "val"):
            rows.append(
                result_row(
                    prov,
                    SPLIT_HEAD,
                    str(SplitName.cross(pair["name"], part)),
                    "shift",
                    float(value),
                    None,
                    None,
                    len(pair.get(part, [])),
                )
            )
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if is_undefined(v):
        return "undefined"
    return format(float(v), ".10g")


def write_results(df: pd.DataFrame, path: str | Path) -> Path:
    """Write results sorted by key, numbers with 10 significant digits: same inputs → same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = df.loc[:, list(RESULT_COLUMNS)].copy()
    for c in ("value", "ci_low", "ci_high"):
        out[c] = [_fmt(v) for v in out[c]]
    out = out.sort_values(["experiment", "head", "split", "metric"], kind="stable")
    tmp = temp_path(path)  # this writer's own
    out.to_csv(tmp, index=False, lineterminator="\n")
    tmp.replace(path)
    return path


def _parse(v: Any) -> MetricValue | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    if isinstance(v, str) and v.strip().lower() == "undefined":
        return UNDEFINED
    return float(v)


def read_results(paths: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """Read one or more results files; value/ci columns hold floats, UNDEFINED or None; `source` names the file."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise DataError("no results files given; run scripts/evaluate.py first")
    frames = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise DataError(f"no results file at {p}; run scripts/evaluate.py first")
        f = pd.read_csv(p, dtype=str, keep_default_na=False)
        missing = [c for c in RESULT_COLUMNS if c not in f.columns]
        if missing:
            raise DataError(f"{p}: results file lacks column(s) {', '.join(missing)}")
        for c in ("value", "ci_low", "ci_high"):
            f[c] = pd.Series([_parse(v) for v in f[c]], dtype=object)
        f["n"] = f["n"].astype(int)
        f["source"] = str(p)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def check_consistent(
    df: pd.DataFrame, keys: Sequence[str] = ("model", "config_hash"), what: str = "table"
) -> None:
    """Refuse results from different models/configs, or the same (head, split, metric) twice, in one table."""
    src = df["source"] if "source" in df.columns else pd.Series(["(in memory)"] * len(df), index=df.index)
    for key in keys:
        values = sorted(df[key].unique())
        if len(values) > 1:
            where = "; ".join(f"{key}={v!r} from {', '.join(sorted(set(src[df[key] == v])))}" for v in values)
            raise DataError(
                f"results mixed into one {what} disagree on {key}: {where}. Tables compare predictors of one "
                f"model and config; evaluate the other run into its own experiment"
            )
    dup = df.duplicated(["experiment", "head", "split", "metric"], keep=False)
    if dup.any():
        first = df.loc[dup].iloc[0]
        files = sorted(set(src[dup & (df["head"] == first["head"]) & (df["split"] == first["split"])]))
        raise DataError(
            f"results for head={first['head']!r} split={first['split']!r} metric={first['metric']!r} appear more "
            f"than once (from {', '.join(files)}); pass each run's results once"
        )


def as_float(v: Any) -> float:
    """A results value as a float for plotting (UNDEFINED/None → NaN, only ever drawn as a gap)."""
    return float(v) if v is not None and not is_undefined(v) else float(np.nan)
