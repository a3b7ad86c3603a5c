"""The measured acceptance file: one row per sampled answer, its per-step draft tokens proposed and accepted.

    data/reference/<model>/spec_ngram_<data>.parquet        (committed, small: no texts, no token ids)

Columns: ``id`` (prompt id), ``sample`` (answer number), ``domain``, ``prompt_tokens``, ``output_tokens`` (the
answer's length, EOS excluded), ``finish_reason`` (``eos`` | ``length``: capped), ``proposed`` and ``accepted``
(list[int], one entry per step; step 0 is the prefill step: 0 and 0). The tokens a step emits are not stored:
``accepted + 1``, the last step cut at ``output_tokens`` (`spec_acceptance.emitted`). The file's schema metadata
(key ``lengthpred.spec``) holds the drafter (num_speculative_tokens, prompt_lookup_min/max, occurrence), the
model, the data and split, and the sampling settings. `read_records` checks every row and stops at the first
bad one with one line naming the file, the row and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lengthpred.errors import DataError
from lengthpred.integrity import temp_path
from lengthpred.sched.spec.acceptance import emitted

META_KEY = b"lengthpred.spec"
COLUMNS = ("id", "sample", "domain", "prompt_tokens", "output_tokens", "finish_reason", "proposed", "accepted")
SCHEMA = pa.schema([
    ("id", pa.string()), ("sample", pa.int32()), ("domain", pa.string()), ("prompt_tokens", pa.int32()),
    ("output_tokens", pa.int32()), ("finish_reason", pa.string()), ("proposed", pa.list_(pa.int16())),
    ("accepted", pa.list_(pa.int16())),
])
FINISH = ("eos", "length")


@dataclass
class AcceptanceRecords:
    """A checked acceptance file: `frame` (COLUMNS) and its metadata; `k` the drafter's tokens per step."""

    frame: pd.DataFrame
    meta: dict[str, Any]
    path: Path

    @property
    def k(self) -> int:
        return int(self.meta["drafter"]["num_speculative_tokens"])

    def __len__(self) -> int:
        return len(self.frame)


def write_records(frame: pd.DataFrame, path: str | Path, meta: dict[str, Any]) -> Path:
    """Write `frame` (COLUMNS) with `meta` (must hold ``drafter``) atomically, after the reader's checks."""
    path = Path(path)
    if "drafter" not in meta:
        raise DataError("acceptance metadata needs the drafter's settings ('drafter')")
    table = pa.Table.from_pandas(frame[list(COLUMNS)], schema=SCHEMA, preserve_index=False)
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
    _check(frame, meta, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)  # this writer's own
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def read_records(path: str | Path) -> AcceptanceRecords:
    """Read and check an acceptance file; a bad one raises a one-line DataError naming file, row and field."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no acceptance file; make it with scripts/measure_acceptance.py (make spec)")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({str(e).splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise DataError(f"{path}: field {missing[0]}: missing column (need {', '.join(COLUMNS)})")
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else None
        k = int(meta["drafter"]["num_speculative_tokens"])
    except (ValueError, TypeError, KeyError):
        meta = None
    if meta is None or k < 1:
        raise DataError(f"{path}: field drafter: no drafter settings in the file's metadata ({META_KEY.decode()})")
    frame = table.select(list(COLUMNS)).to_pandas()
    _check(frame, meta, path)
    frame["proposed"] = [np.asarray(x, dtype=np.int64) for x in frame["proposed"]]
    frame["accepted"] = [np.asarray(x, dtype=np.int64) for x in frame["accepted"]]
    return AcceptanceRecords(frame, meta, path)


def _check(frame: pd.DataFrame, meta: dict[str, Any], path: Path) -> None:
    k = int(meta["drafter"]["num_speculative_tokens"])
    if len(frame) == 0:
        raise DataError(f"{path}: no rows")
    seen: set[tuple[str, int]] = set()
    for r, row in enumerate(frame.itertuples(index=False)):
        def bad(field: str, why: str, r=r, row=row) -> DataError:
            return DataError(f"{path}: row {r} (id {row.id}): field {field}: {why}")

        if not isinstance(row.id, str) or not row.id:
            raise bad("id", "empty or not a string")
        if (row.id, int(row.sample)) in seen:
            raise bad("sample", f"duplicate (id, sample) = ({row.id}, {row.sample})")
        seen.add((row.id, int(row.sample)))
        for f in ("sample", "prompt_tokens", "output_tokens"):
            v = getattr(row, f)
            if v is None or not float(v).is_integer() or v < 0:
                raise bad(f, f"{v!r} is not a count >= 0")
        if row.finish_reason not in FINISH:
            raise bad("finish_reason", f"{row.finish_reason!r}; valid: {', '.join(FINISH)}")
        prop, acc = row.proposed, row.accepted
        if prop is None or acc is None or len(prop) == 0 or len(prop) != len(acc):
            raise bad("accepted", "proposed and accepted must be non-empty lists of the same length")
        p, a = np.asarray(prop, dtype=np.int64), np.asarray(acc, dtype=np.int64)
        if p[0] != 0 or a[0] != 0:
            raise bad("proposed", "step 0 is the prefill step and drafts nothing (0, 0)")
        if p.min() < 0 or p.max() > k:
            raise bad("proposed", f"a step proposes {p.min() if p.min() < 0 else p.max()} tokens; the drafter's k is {k}")
        if np.any(a < 0) or np.any(a > p):
            raise bad("accepted", "a step accepts fewer than 0 or more tokens than it proposed")
        L = int(row.output_tokens)
        done = np.cumsum(emitted(a, L))  # [steps] tokens out after each step
        before = int(done[-2]) if len(done) > 1 else 0
        if done[-1] != L or (len(done) > 1 and before >= L) or a[-1] > max(L - before, 0):
            raise bad("accepted", f"the steps emit {int(done[-1])} tokens, not output_tokens={L}, or go past its end")
