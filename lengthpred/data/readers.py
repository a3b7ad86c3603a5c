"""File readers that name file, line and field on bad input, or skip and count when told to."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lengthpred.errors import ConfigError, DataError

ON_BAD = ("raise", "skip")


class BadInputLog:
    """Policy plus tally for bad input: `raise` (default) stops at the first problem; `skip` counts."""

    def __init__(self, on_bad: str = "raise") -> None:
        if on_bad not in ON_BAD:
            raise ConfigError(f"data.on_bad_input={on_bad!r}; valid: {', '.join(ON_BAD)}")
        self.on_bad = on_bad
        self.counts: Counter[str] = Counter()
        self.examples: list[str] = []

    def bad(self, kind: str, where: str, detail: str) -> None:
        msg = f"{where}: {kind}: {detail}"
        if self.on_bad == "raise":
            raise DataError(msg + " (set data.on_bad_input=skip to skip and count such records)")
        self.counts[kind] += 1
        if len(self.examples) < 5:
            self.examples.append(msg)

    def total(self) -> int:
        return sum(self.counts.values())


def _open_text(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"{path}: file not found (check data.root / data.train_path, or run "
                        "scripts/fetch_datasets.py)")
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="surrogateescape")


def _check_utf8(text: str, where: str, log: BadInputLog) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        log.bad("non-UTF-8 bytes", where, f"at character {e.start}")
        return False
    return True


def iter_jsonl(path: Path, log: BadInputLog) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) per non-blank line; `where` is `file:line` for error messages."""
    text = _open_text(path)
    for n, line in enumerate(text.split("\n"), start=1):  # not splitlines: U+2028 is data
        if not line.strip():
            continue
        where = f"{path}:{n}"
        if not _check_utf8(line, where, log):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            log.bad("malformed JSON", where, e.msg)
            continue
        if not isinstance(row, dict):
            log.bad("malformed record", where, f"expected a JSON object, got {type(row).__name__}")
            continue
        yield where, row


def iter_json_array(path: Path, log: BadInputLog) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) per element of a top-level JSON array; `where` is `file[index]`."""
    text = _open_text(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a JSON array cannot skip one record: always an error
        raise DataError(f"{path}:{text[:e.start].count(chr(10)) + 1}: non-UTF-8 bytes") from None
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: malformed JSON: {e.msg}") from None
    if not isinstance(rows, list):
        raise DataError(f"{path}: expected a JSON array of records")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            log.bad("malformed record", f"{path}[{i}]", "expected a JSON object")
            continue
        yield f"{path}[{i}]", row


def iter_csv(path: Path, log: BadInputLog) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) per CSV data row; `where` is `file:line` (header is line 1)."""
    text = _open_text(path)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    for row in reader:
        where = f"{path}:{reader.line_num}"
        if not _check_utf8("".join(str(v) for v in row.values()), where, log):
            continue
        if None in row:
            log.bad("malformed line", where, "more fields than the header")
            continue
        yield where, row


def iter_parquet(path: Path, log: BadInputLog) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{path}: not a readable Parquet file ({e})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path}:row {i}", row


def iter_rows(path: Path, log: BadInputLog) -> Iterator[tuple[str, dict[str, Any]]]:
    """Dispatch on suffix: .jsonl/.jsonl.gz, .json (array), .csv, .parquet."""
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        return iter_jsonl(path, log)
    if name.endswith(".json"):
        return iter_json_array(path, log)
    if name.endswith(".csv"):
        return iter_csv(path, log)
    if name.endswith((".parquet", ".pq")):
        return iter_parquet(path, log)
    raise DataError(f"{path}: unknown file type (expected .jsonl, .json, .csv or .parquet)")


def field(row: dict[str, Any], name: str, where: str, log: BadInputLog) -> Any:
    """row[name], or a bad-input report naming the field; returns None when skipped."""
    if name not in row or row[name] is None:
        log.bad("missing field", where, f"field {name!r} not present (fields: {', '.join(map(str, row))})")
        return None
    return row[name]
