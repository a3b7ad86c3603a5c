"""Read CASTILLO's validate files of every (dataset, model) into one prompt union and its length table.

Files: `<root>/<Dataset>/<model>.jsonl`, rows with `prompt_text` and `output_sizes` (k sampled lengths).
A prompt's id is the one `castillo:<model>` sources give it (source `castillo`, content-derived), so the
same prompt read from 13 models' files is one prompt.

Bad input, each reported and never silently dropped:
- a (dataset, model) file that CASTILLO does not ship (`lengthpred.data.castillo.MISSING`) is listed as
  missing by design; any other absent file, model or dataset is a warning line in the report;
- a row with fewer than `n_samples` lengths, an empty prompt or a malformed field stops with file:line
  and field (`on_bad_input=skip`: skipped and counted); a row with more keeps the first `n_samples` (counted);
- a prompt repeated in one file keeps its first row; one listed under two datasets keeps the first dataset
  (both counted).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lengthpred.crossmodel.table import LengthTable
from lengthpred.data.castillo import DATASETS, MISSING, MODELS, castillo_domain
from lengthpred.data.readers import BadInputLog, iter_rows
from lengthpred.data.readers import field as row_field
from lengthpred.data.records import make_record
from lengthpred.data.trace import parse_lengths, parse_messages
from lengthpred.errors import ConfigError, DataError

log = logging.getLogger(__name__)
SOURCE = "castillo"  # the record source of every castillo:<model> source: one id per prompt text


@dataclass
class PromptUnion:
    """Every prompt once (`records`, with `dataset`), and every model's samples on it (`table`)."""

    records: list[dict[str, Any]]
    table: LengthTable
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def dataset_of(self) -> dict[str, str]:
        return {r["id"]: r["dataset"] for r in self.records}

    def datasets(self) -> list[str]:
        return sorted({r["dataset"] for r in self.records})


def _names(value: Any, known: Sequence[str], what: str) -> list[str]:
    """`all` → every known name; else the given list (an unknown name is only warned about: it may be a
    model or dataset the local copy does not have, which the report then lists as missing)."""
    if value in (None, "all"):
        return list(known)
    if isinstance(value, str):
        raise ConfigError(f"data.{what}={value!r}: use 'all' or a list of names")
    names = [str(v) for v in value]
    if not names:
        raise ConfigError(f"data.{what} is empty")
    return names


def read_union(
    root: str | Path,
    *,
    models: Any = "all",
    datasets: Any = "all",
    prompt_field: str = "prompt_text",
    length_field: str = "output_sizes",
    n_samples: int = 10,
    cap: float | None = None,
    on_bad_input: str = "raise",
) -> PromptUnion:
    """The union of every listed model's prompts over every listed dataset (module docstring for bad input)."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"data.root={root}: no CASTILLO validate folder (expected <Dataset>/<model>.jsonl)")
    if int(n_samples) < 2:
        raise ConfigError(f"data.n_samples={n_samples}: the ceiling needs at least 2 samples per prompt")
    models, datasets = _names(models, MODELS, "models"), _names(datasets, list(DATASETS), "datasets")
    bad = BadInputLog(on_bad_input)
    counts: Counter[str] = Counter()
    by_design, absent = [], []
    records: dict[str, dict[str, Any]] = {}
    samples: dict[tuple[str, str], list[int]] = {}  # (id, model) -> first n_samples lengths
    rows_per_file: dict[str, dict[str, int]] = {}
    for ds in datasets:
        if not (root / ds).is_dir():
            absent.append(f"dataset {ds}: no folder {root / ds}")
            continue
        for m in models:
            path = root / ds / f"{m}.jsonl"
            if not path.is_file():
                (by_design if (ds, m) in MISSING else absent).append(f"{ds}/{m}")
                continue
            n_kept = 0
            for where, row in iter_rows(path, bad):
                rec = _read_row(where, row, ds, prompt_field, length_field, int(n_samples), bad, counts)
                if rec is None:
                    continue
                pid = rec["id"]
                if (pid, m) in samples:
                    counts["duplicate rows in one file (first kept)"] += 1
                    continue
                if pid in records and records[pid]["dataset"] != ds:
                    counts["prompts listed under two datasets (first kept)"] += 1
                records.setdefault(pid, rec)
                samples[(pid, m)] = rec.pop("_lengths")
                n_kept += 1
            rows_per_file.setdefault(ds, {})[m] = n_kept
    for m in models:
        if not any(m in v for v in rows_per_file.values()):
            absent.append(f"model {m}: no file in any dataset")
    if not records:
        raise DataError(f"{root}: no usable CASTILLO rows for models {models} and datasets {datasets}")
    for line in absent:
        log.warning("CASTILLO: missing %s", line)
    ids = sorted(records)
    arr = np.full((len(ids), len(models), int(n_samples)), np.nan)
    row = {pid: i for i, pid in enumerate(ids)}
    for (pid, m), s in samples.items():
        arr[row[pid], models.index(m)] = s
    recs = [records[i] for i in ids]
    report = {
        "n_prompts": len(ids),
        "per_dataset": dict(sorted(Counter(r["dataset"] for r in recs).items())),
        "rows_per_file": rows_per_file,
        "missing_by_design": by_design,
        "missing": absent,
        "bad_input_skipped": dict(bad.counts),
        "bad_input_examples": bad.examples,
        "notes": dict(counts),
    }
    return PromptUnion(recs, LengthTable(ids, models, arr, cap), report)


def _read_row(where: str, row: dict[str, Any], dataset: str, prompt_field: str, length_field: str,
              k: int, bad: BadInputLog, counts: Counter[str]) -> dict[str, Any] | None:
    """One file row → a prompt record with `dataset` and its first k lengths under `_lengths`, or None."""
    raw = row_field(row, prompt_field, where, bad)
    if raw is None:
        return None
    msgs = parse_messages(raw, where, prompt_field, bad)
    if msgs is None:
        return None
    v = row_field(row, length_field, where, bad)
    lengths = None if v is None else parse_lengths(v, where, length_field, bad)
    if lengths is None:
        return None
    if len(lengths) < k:
        bad.bad("too few samples", where, f"field {length_field!r} has {len(lengths)} lengths, need {k} "
                                          "(data.n_samples)")
        return None
    if len(lengths) > k:
        counts[f"rows with more than {k} samples (first {k} kept)"] += 1
    rec = make_record(SOURCE, castillo_domain(dataset, row), msgs, category=f"castillo/{dataset}")
    rec["dataset"] = dataset
    rec["_lengths"] = lengths[:k]
    return rec
