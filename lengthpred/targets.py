"""Per-prompt length targets as a library: the one table of per-prompt statistics, the one normaliser of
targets frames, and the committed reference trace's file format.

Where a config's targets come from (merged generations, the reference trace, or the lengths a trace's
prompt table records) is decided in one place, `lengthpred.stages.targets.load_targets`.

Censoring rule (the same for every head): a capped sample (finish_reason "length") counts as the cap,
a lower bound, and is counted (`n_capped`, `capped_frac`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.integrity import temp_path

log = logging.getLogger(__name__)

# The one table of per-prompt statistics over a prompt's samples (in sample order): the generate stage's
# `generate.targets.statistic` and a trace's `data.length_stat` both name one of these.
STATISTICS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda x: float(x.mean()),
    "median": lambda x: float(np.median(x)),
    "first": lambda x: float(x[0]),
    "max": lambda x: float(x.max()),
    "min": lambda x: float(x.min()),
}
REFERENCE_COLUMNS = ("id", "sample", "length", "finish_reason", "prompt_tokens")
# columns a targets frame may hold its per-prompt target in, in order of preference
TARGET_COLUMNS = ("y", "target", "y_true", "length", "mean")


def check_statistic(statistic: str, what: str = "target statistic") -> str:
    """`statistic` when it names a row of STATISTICS, else a ConfigError naming `what` and the valid ones."""
    if statistic not in STATISTICS:
        raise ConfigError(f"{what} {statistic!r}: use one of {list(STATISTICS)}")
    return statistic


def target_statistic(lengths: Iterable[float], statistic: str = "mean") -> float:
    """One prompt's target from its samples (in sample order)."""
    x = np.asarray(list(lengths), dtype=float)
    if x.size == 0:
        raise DataError("a prompt with no samples has no target")
    return STATISTICS[check_statistic(statistic)](x)


def per_prompt(rows: pd.DataFrame, statistic: str = "mean", cap: int | None = None) -> pd.DataFrame:
    """(id, sample, length, finish_reason) rows → one row per id (sorted): lengths, finish_reasons,
    n_samples, n_capped, capped_frac, target. Capped lengths are clipped to `cap` (= the cap)."""
    missing = {"id", "sample", "length", "finish_reason"} - set(rows.columns)
    if missing:
        raise DataError(f"generation rows lack columns {sorted(missing)}")
    check_statistic(statistic)
    df = rows.sort_values(["id", "sample"])
    if df.duplicated(["id", "sample"]).any():
        raise DataError("generation rows hold duplicate (id, sample) pairs")
    lengths = df["length"].astype(int)
    if cap is not None:
        lengths = lengths.where(df["finish_reason"] != "length", cap)
    df = df.assign(length=lengths, capped=df["finish_reason"] == "length")
    g = df.groupby("id", sort=True)
    out = pd.DataFrame({
        "lengths": g["length"].agg(list),
        "finish_reasons": g["finish_reason"].agg(list),
        "n_samples": g.size(),
        "n_capped": g["capped"].sum().astype(int),
    })
    out["capped_frac"] = out["n_capped"] / out["n_samples"]
    out["target"] = [target_statistic(v, statistic) for v in out["lengths"]]
    out.index.name = "id"
    return out


def from_records(records: Iterable[Mapping[str, Any]], statistic: str = "mean") -> pd.DataFrame:
    """Targets from a prompt table's own lengths (a trace, CASTILLO): its `length` column (the data stage's
    `length_stat`) or `statistic` of `lengths`; prompts without lengths are dropped. Columns: lengths,
    n_samples (at least 1), n_capped, capped_frac (0: a trace records no cap), target; in table order."""
    check_statistic(statistic, "data.length_stat")
    rows = []
    for r in records:
        lengths = [int(v) for v in (r.get("lengths") or [])]
        y = r.get("length")
        if y is None and lengths:
            y = target_statistic(lengths, statistic)
        if y is not None:
            rows.append((str(r["id"]), lengths, max(len(lengths), 1), float(y)))
    if not rows:
        raise DataError("no prompt has recorded lengths and no generated targets exist: run scripts/generate.py")
    ids, lengths, n, y = zip(*rows, strict=True)
    out = pd.DataFrame({"lengths": list(lengths), "n_samples": list(n), "n_capped": 0, "capped_frac": 0.0,
                        "target": list(y)}, index=pd.Index(list(ids), name="id"))
    return out


def target_frame(targets: Any) -> pd.DataFrame:
    """The one normaliser of per-prompt targets: a frame indexed by (str) prompt id with `y` (tokens),
    `n_samples` (1 when absent) and `capped_frac` (0 when absent), other columns (lengths, domain, …) kept.

    Accepts a DataFrame (an `id` column or index; the target in the first of TARGET_COLUMNS it holds,
    renamed `y`) or a mapping id → length.
    """
    if isinstance(targets, Mapping):
        df = pd.DataFrame({"y": pd.Series({str(k): float(v) for k, v in targets.items()}, dtype=float)})
    elif isinstance(targets, pd.DataFrame):
        df = targets.set_index("id") if "id" in targets.columns else targets.copy()
        col = next((c for c in TARGET_COLUMNS if c in df.columns), None)
        if col is None:
            raise DataError(f"targets have none of the columns {TARGET_COLUMNS}; got {list(df.columns)}")
        df = df.rename(columns={col: "y"})
        df["y"] = pd.to_numeric(df["y"], errors="coerce").astype(float)
    else:
        raise DataError(f"targets must be a DataFrame or a mapping id -> length, got {type(targets).__name__}")
    df.index = df.index.astype(str)
    if df.index.duplicated().any():
        raise DataError("targets have duplicate ids (expected one row per prompt)")
    if "n_samples" not in df.columns:
        df["n_samples"] = 1
    if "capped_frac" not in df.columns:
        df["capped_frac"] = 0.0
    return df


def sample_lengths(targets: pd.DataFrame) -> dict[str, list[int]]:
    """id → its sampled lengths (capped ones as the cap), from a targets frame's `lengths` column."""
    return {str(i): [int(x) for x in v] for i, v in targets["lengths"].items()}


def write_reference(rows: pd.DataFrame, path: Path, meta: Mapping[str, Any]) -> Path:
    """The committed trace: a first line {"meta": {...settings}} then one line per (id, sample), no texts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df = rows.sort_values(["id", "sample"])[list(REFERENCE_COLUMNS)]
    tmp = temp_path(path)  # this writer's own
    with tmp.open("w") as f:
        f.write(json.dumps({"meta": dict(meta)}, sort_keys=True) + "\n")
        for r in df.itertuples(index=False):
            f.write(json.dumps({"id": r.id, "sample": int(r.sample), "length": int(r.length),
                                "finish_reason": r.finish_reason, "prompt_tokens": int(r.prompt_tokens)}) + "\n")
    tmp.replace(path)
    return path


def read_reference(path: Path) -> tuple[pd.DataFrame, dict]:
    """(rows, meta) of a reference trace file; a line that is not JSON (a partial last line) or a length that
    is not a finite non-negative number (a boolean, Infinity) stops with file:line and field."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no reference trace at {path}; generate one with scripts/generate.py generate=reference")
    lines = path.read_text().splitlines()
    parsed = [(n, _reference_line(path, n, line)) for n, line in enumerate(lines, start=1) if line.strip()]
    if not parsed or "meta" not in parsed[0][1]:
        raise DataError(f"{path}: first line must be {{\"meta\": ...}}")
    meta = parsed[0][1]["meta"]
    for n, row in parsed[1:]:
        for key in ("length", "prompt_tokens"):
            v = row.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v)
                                  or v < 0):
                raise DataError(f"{path}:{n}: field {key!r}={v!r} is not a finite non-negative number")
    rows = pd.DataFrame([row for _, row in parsed[1:]])
    if meta.get("n_rows") is not None and len(rows) != meta["n_rows"]:
        raise DataError(f"{path}: {len(rows)} rows but its meta says {meta['n_rows']} (truncated trace?)")
    return rows, meta


def _reference_line(path: Path, n: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{n}: not a JSON line ({e.msg}; a partial last line? regenerate or restore "
                        "the file, e.g. `git checkout` it)") from None
    if not isinstance(row, dict):
        raise DataError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
    return row


def reference_samples(path: Path) -> dict[str, list[int]]:
    """id → its sampled lengths (capped ones as the cap) from a reference trace: the noise ceiling's input."""
    rows, _ = read_reference(path)
    if not {"id", "length"} <= set(rows.columns) or rows["length"].isna().any():
        raise DataError(f"{path}: reference trace rows need id and length")
    out: dict[str, list[int]] = {}
    for i, n in zip(rows["id"].astype(str), rows["length"].astype(int), strict=True):
        out.setdefault(i, []).append(int(n))
    return out


def samples_from_prompts(records: Any) -> dict[str, list[float]]:
    """Per-id sampled lengths from a prompt table's `lengths` column (a trace such as CASTILLO)."""
    return {
        str(r["id"]): [float(x) for x in r["lengths"]] for r in records if len(r.get("lengths") or []) >= 2
    }


def sample_agreement(targets: pd.DataFrame) -> float:
    """Mean pairwise Spearman correlation between sample j and sample k across prompts: the noise
    ceiling of any predictor of a single sample (NaN with fewer than 2 samples)."""
    from scipy.stats import spearmanr

    n = int(targets["n_samples"].min())
    if n < 2:
        return float("nan")
    mat = np.array([v[:n] for v in targets["lengths"]], dtype=float)  # [prompts, samples]
    return float(np.mean([spearmanr(mat[:, a], mat[:, b]).statistic for a, b in combinations(range(n), 2)]))


def complete_rows(rows: pd.DataFrame, num_samples: int) -> pd.DataFrame:
    """The rows of the prompts whose `num_samples` samples are all present (a partial export)."""
    counts = rows.groupby("id")["sample"].nunique()
    return rows[rows["id"].isin(counts.index[counts == num_samples])]


def reference_meta(manifest: Mapping[str, Any], rows: pd.DataFrame | None = None, *,
                   partial: bool = False) -> dict[str, Any]:
    """The meta line of a reference trace from a generation run's manifest (counts from `rows` when partial)."""
    m = dict(manifest)
    if rows is not None:
        m.update(n_prompts=int(rows["id"].nunique()), n_rows=len(rows),
                 n_capped=int((rows["finish_reason"] == "length").sum()))
    meta = {k: m.get(k) for k in ("settings", "settings_hash", "model", "data", "dtype", "max_context",
                                   "n_prompts", "n_rows", "n_capped", "n_truncated", "rejected")}
    meta["partial"] = partial
    return meta


__all__ = [
    "REFERENCE_COLUMNS", "STATISTICS", "TARGET_COLUMNS", "check_statistic", "complete_rows", "from_records",
    "per_prompt", "read_reference", "reference_meta", "reference_samples", "sample_agreement",
    "sample_lengths", "samples_from_prompts", "target_frame", "target_statistic", "write_reference",
]
