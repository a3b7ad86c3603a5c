"""Bring-your-own trace (`data=trace`): a JSONL/CSV/Parquet file of prompts with measured output lengths.

Options (conf/data/trace.yaml): data.train_path, data.test_path, data.prompt_field, data.length_field,
data.length_stat (default mean), data.domain_field (optional). Paths may be globs or lists of paths.
"""

from __future__ import annotations

import glob
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lengthpred.data.readers import BadInputLog, field, iter_rows
from lengthpred.data.records import content_key, make_record
from lengthpred.data.settings import TraceData
from lengthpred.data.splits import cross_pairs, dedup_train, forelen, split_ids
from lengthpred.errors import ConfigError, DataError
from lengthpred.paths import resolve
from lengthpred.targets import check_statistic, target_statistic

Record = dict[str, Any]


def length_stat(name: str) -> Callable[[Sequence[int]], float]:
    """A prompt's length from its sampled lengths: one row of `lengthpred.targets.STATISTICS`."""
    check_statistic(name, "data.length_stat")
    return lambda lengths: target_statistic(lengths, name)


def _locate(spec: str) -> Path:
    """A relative path means the working directory when something is there, else the home (lengthpred.paths)."""
    p = Path(spec).expanduser()
    if p.is_absolute():
        return p
    here = Path.cwd() / p
    return here if here.exists() or glob.glob(str(here)) else resolve(spec)


def expand_paths(spec: str | Sequence[str] | None, what: str, file_name: str | None = None) -> list[Path]:
    """A path, a glob, or a list of either → existing files (a pattern that matches nothing is an error). With
    `file_name` (`data.trace_file`), a folder means the file of that name in each of its sub-folders that has
    it (CASTILLO's `<dataset>/<model>.jsonl`), in folder-name order."""
    if spec is None:
        return []
    specs = [spec] if isinstance(spec, str | Path) else list(spec)
    out: list[Path] = []
    for s in map(str, specs):
        p = _locate(s)
        if file_name and p.is_dir():
            hits = sorted(f for f in (d / file_name for d in p.iterdir() if d.is_dir()) if f.is_file())
            if not hits:
                raise DataError(f"{what}={p}: no sub-folder holds {file_name}")
            out += hits
        elif any(ch in s for ch in "*?["):
            hits = sorted(Path(h) for h in glob.glob(str(p)))
            if not hits:
                raise DataError(f"{what}={s}: no file matches")
            out += hits
        elif not p.is_file():
            raise DataError(f"{what}={p}: file not found")
        else:
            out.append(p)
    return out


def parse_messages(value: Any, where: str, name: str, log: BadInputLog) -> list[dict[str, str]] | None:
    """Plain text → one user turn; a list of {role, content} (or a JSON string of one) → those turns."""
    if isinstance(value, str) and value.lstrip().startswith("[{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass  # a text prompt that happens to start with "[{"
    if isinstance(value, str):
        msgs = [{"role": "user", "content": value}]
    elif isinstance(value, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value):
        msgs = [{"role": str(m["role"]), "content": str(m["content"])} for m in value]
    else:
        log.bad("malformed field", where, f"field {name!r} must be text or a list of {{role, content}}")
        return None
    if not any(m["content"].strip() for m in msgs if m["role"] == "user"):
        log.bad("empty prompt", where, f"field {name!r} has no user text")
        return None
    for m in msgs:
        try:
            m["content"].encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate (JSON "\ud800"): no tokenizer or file can hold it
            log.bad("malformed field", where, f"field {name!r} holds {m['content'][e.start]!r} at character {e.start}, "
                    "a lone surrogate that is not Unicode text")
            return None
    return msgs


MAX_LENGTH = 2**31 - 1  # tokens: what every store's int32 holds (a real answer is millions of times shorter)


def parse_lengths(value: Any, where: str, name: str, log: BadInputLog) -> list[int] | None:
    """An int, a list of ints, or a string of either (CSV) → list[int] in [0, MAX_LENGTH]; booleans and
    non-finite numbers are bad input (file:line and field)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            log.bad("malformed field", where, f"field {name!r}={value[:40]!r} is not a number or list")
            return None
    vals = value if isinstance(value, list) else [value]
    if any(isinstance(v, bool) for v in vals):  # JSON true is not a length (Python would read it as 1)
        log.bad("malformed field", where, f"field {name!r}={str(value)[:40]} is a boolean, not a length")
        return None
    if any(isinstance(v, float) and not math.isfinite(v) for v in vals):
        log.bad("malformed field", where, f"field {name!r}={str(value)[:40]} is not finite")
        return None
    try:
        out = [int(v) for v in vals]
        if not out or any(v < 0 or v != float(w) for v, w in zip(out, vals, strict=True)):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        log.bad("malformed field", where, f"field {name!r}={str(value)[:40]} is not a non-negative int or list")
        return None
    if any(v > MAX_LENGTH for v in out):
        log.bad("malformed field", where, f"field {name!r}={str(value)[:40]} is out of range (0..{MAX_LENGTH} tokens)")
        return None
    return out


def read_trace(
    paths: Sequence[Path],
    prompt_field: str,
    length_field: str | None,
    log: BadInputLog,
    *,
    source: str = "trace",
    domain_field: str | None = None,
    default_domain: str = "all",
    length_model: str = "trace",
    domain_map: Callable[[str, dict], str] | None = None,
) -> Iterator[Record]:
    """One record per valid row (rows with the same prompt are not merged here; see merge_duplicates)."""
    for path in paths:
        for where, row in iter_rows(path, log):
            raw = field(row, prompt_field, where, log)
            if raw is None:
                continue
            msgs = parse_messages(raw, where, prompt_field, log)
            if msgs is None:
                continue
            lengths: list[int] = []
            if length_field:
                v = field(row, length_field, where, log)
                if v is None:
                    continue
                parsed = parse_lengths(v, where, length_field, log)
                if parsed is None:
                    continue
                lengths = parsed
            dom = default_domain
            if domain_field:
                d = field(row, domain_field, where, log)
                if d is None:
                    continue
                dom = str(d)
            if domain_map is not None:
                dom = domain_map(dom, row)
            yield make_record(source, dom, msgs, category=dom, lengths=lengths, length_model=length_model)


def merge_duplicates(records: Sequence[Record]) -> tuple[list[Record], int]:
    """Rows with the same id become one prompt whose lengths are all rows' samples (a log may repeat)."""
    by_id: dict[str, Record] = {}
    n = 0
    for r in records:
        if r["id"] in by_id:
            by_id[r["id"]]["lengths"] = by_id[r["id"]]["lengths"] + r["lengths"]
            n += 1
        else:
            by_id[r["id"]] = dict(r)
    return list(by_id.values()), n


def build_from_trace(s: TraceData) -> tuple[list[Record], dict[str, Any]]:
    """Trace records and splits: indomain["all"] (val carved from train), per-domain and cross pairs."""
    if not s.train_path:
        raise ConfigError("data=trace needs data.train_path=<file.jsonl|csv|parquet> (a glob or list works)")
    length_stat(s.length_stat)  # fail on a bad name before reading anything
    bad = BadInputLog(s.on_bad_input)
    kw = dict(domain_field=s.domain_field, length_model=str(s.length_model))
    pf, lf = str(s.prompt_field), s.length_field
    train_recs, n_dup_tr = merge_duplicates(list(read_trace(expand_paths(s.train_path, "data.train_path", s.trace_file),
                                                            pf, lf, bad, **kw)))
    seed = int(s.seed)
    val_f, test_f = float(s.val_fraction), float(s.test_fraction)
    n_cross_dup = 0
    if s.test_path:
        test_recs, n_dup_te = merge_duplicates(list(read_trace(expand_paths(s.test_path, "data.test_path", s.trace_file),
                                                               pf, lf, bad, **kw)))
        test_keys = {content_key(r["messages"]) for r in test_recs}
        kept = [r for r in train_recs if content_key(r["messages"]) not in test_keys]
        n_cross_dup = len(train_recs) - len(kept)
        tr_va = split_ids([r["id"] for r in kept], {"train": 1 - val_f, "val": val_f, "test": 0.0}, seed)
        test_ids = sorted(r["id"] for r in test_recs)
        train_recs = kept
    else:
        test_recs, n_dup_te = [], 0
        tr_va = split_ids([r["id"] for r in train_recs],
                          {"train": 1 - val_f - test_f, "val": val_f, "test": test_f}, seed)
        test_ids = tr_va["test"]
    records = train_recs + [r for r in test_recs if r["id"] not in {x["id"] for x in train_recs}]
    if not records:
        raise DataError(f"data.train_path={s.train_path}: no usable records")
    by_id = {r["id"]: r for r in records}
    tr, n_rm = dedup_train(tr_va["train"], test_ids, by_id)
    whole = {"train": tr, "val": tr_va["val"], "test": test_ids}
    domains = sorted({r["domain"] for r in records})
    pairs: list[dict[str, Any]] = []
    if s.domain_field and len(domains) > 1:
        # per-domain parts partition the whole (no "all" beside them: pooling the domains gives it)
        indomain = {d: {k: [i for i in v if by_id[i]["domain"] == d] for k, v in whole.items()} for d in domains}
        pairs, _ = cross_pairs(indomain, by_id, mix=bool(s.cross_mix))
    else:
        indomain = {"all": whole}
    splits = {
        "indomain": indomain,
        "cross": pairs,
        "forelen": forelen(records, [], s.forelen, seed),
        "meta": {
            "seed": seed, "n_prompts": len(records), "length_stat": s.length_stat,
            "counts": dict(Counter(r["domain"] for r in records)),
            "bad_input_skipped": dict(bad.counts), "bad_input_examples": bad.examples,
            "merged_duplicate_rows": n_dup_tr + n_dup_te,
            "train_test_duplicates_removed": n_cross_dup + n_rm,
        },
    }
    return records, splits
