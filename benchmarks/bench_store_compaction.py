"""Feature-store load time at scale: one column of N synthetic prompts read from the part files (one per 16
prompts, as extraction writes them) and from the compacted store (one memory-mapped Arrow file per column), and
what the per-load verification costs once every file has been checked.

    .venv/bin/python benchmarks/bench_store_compaction.py                  # 10,000 prompts, d=576, 8 columns a part
    .venv/bin/python benchmarks/bench_store_compaction.py --columns 279 --tokens 64   # SmolLM2-135M's default set
    .venv/bin/python benchmarks/bench_store_compaction.py --d 4096 --columns 54       # Llama-3.1-8B's trimmed set
    .venv/bin/python benchmarks/bench_store_compaction.py --n 2000 --reps 3

The share a verification takes depends on the store's shape: its cost is a stat per file (a part, and its
token-level file where there is one), while a part's load grows with the part's header (one entry per column) and
the column's width, so a store of few narrow columns is the worst case.

No model runs: random float16 columns are written with the store's own writer (`write_part`), so the layout,
checksums and verification record are what an extraction leaves. Timings are the median of `--reps` loads, each
in this warm process with the files in the page cache (a cold disk makes the parts layout slower still: it opens
N/16 files per column, the compacted store one). Reported: a "load" is `load_features(store)` plus `.get(column)`;
"verification" is the check such a load makes: for the parts, the very `check_parts` call of `intact_parts`
(one stat per part file, its digest file's presence read from the folder listing the load makes anyway, all compared
at once with the record's seal; the token-level files, which a column load does not read, are checked when token
states are read, and that check is reported apart in seconds); for a compacted
store, `VerifiedFiles.check` of its two files (each and its digest file stat-ed); each compared with the record,
nothing read or re-hashed, with reading the record itself reported apart (a load reads it
anyway: it also lists each part's ids), and, for the first load, the one full hash of every file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lengthpred.features.compact import COMPACT, IDS, column_file
from lengthpred.features.maintenance import compact_store
from lengthpred.features.store import (
    MANIFEST,
    PART_SUFFIX,
    TOKENS_SUFFIX,
    atomic_write_json,
    check_parts,
    listed_parts,
    load_features,
    part_files,
    to_float32,
    write_part,
)
from lengthpred.integrity import VerifiedFiles
from lengthpred.machine import record

POOLS = ("last", "mean", "max", "entropy", "attn", "fused_a", "fused_b", "fused_c", "fused_d")  # 9 x 31 layers = 279


def token_states(b: int, tokens: int, d: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """A part's token-level file as extraction writes it for one token layer: `tokens` prompt tokens a prompt."""
    n = b * tokens
    return {"hs.L20": torch.from_numpy(rng.standard_normal((n, d)).astype(np.float16)),
            "entropy": torch.rand(n), "attn": torch.rand(n), "span": torch.ones(n, dtype=torch.uint8),
            "offsets": torch.arange(0, n + 1, tokens)}


def write_store(root: Path, n: int, d: int, columns: list[str], batch: int, tokens: int = 0) -> None:
    rng = np.random.default_rng(0)
    ids = [f"p{i:06d}" for i in range(n)]
    atomic_write_json(root / MANIFEST, {"ids": ids, "columns": {c: d for c in columns}, "dtype": "float16",
                                        "cache_key": "bench", "model": {"name": "synthetic", "dtype": "float16"}})
    for k in range(0, n, batch):
        chunk = ids[k:k + batch]
        cols = {c: torch.from_numpy(rng.standard_normal((len(chunk), d)).astype(np.float16)) for c in columns}
        write_part(root, chunk, cols, token_states(len(chunk), tokens, d, rng) if tokens else None, shard=(0, 1))


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def verification_time(files: list[Path], folder: Path, reps: int,
                      listed: set[str] | None = None) -> tuple[float, float]:
    """(the checks a load makes of `files` once they are recorded, reading the record itself): median seconds each.
    `listed`: the folder listing a parts load makes anyway, which says whether each digest file is there. The record
    (`.verified.json`) is read by every load anyway, for the parts' ids it also keeps, so it is reported apart from
    the checks."""
    read = median_time(lambda: VerifiedFiles(folder), reps)
    v = VerifiedFiles(folder)
    if listed is not None:  # a parts load: the call `intact_parts` makes
        assert not any(why for why, _ in check_parts(files, listed, v, tokens=False))
        return median_time(lambda: check_parts(files, listed, v, tokens=False), reps), read

    def check() -> None:
        for f in files:
            assert v.check(f) is None

    return median_time(check, reps), read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000, help="prompts")
    ap.add_argument("--d", type=int, default=576, help="hidden size (SmolLM2-135M: 576; Llama-3.1-8B: 4096)")
    ap.add_argument("--columns", type=int, default=8,
                    help="columns per part, up to 279 (the default feature set of SmolLM2-135M: 31 hidden_states "
                         "indices x 9 pools; Llama-3.1-8B's trimmed default set: 9 x 6 = 54)")
    ap.add_argument("--tokens", type=int, default=0,
                    help="token-level states per part, this many tokens a prompt (0: none; the default feature "
                         "set keeps layer 20 token by token, so each part has a second file to verify)")
    ap.add_argument("--batch", type=int, default=16, help="prompts per part (features.batch_size)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="build the store here and keep it (default: a temp folder)")
    ap.add_argument("--out", type=Path, help="also write the result, machine and commit here (JSON; the docs render "
                                             "docs/results/data/scale/store_compaction.json)")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    columns = [f"hs.L{layer}.{pool}" for layer in range(31) for pool in POOLS][: args.columns]
    col = columns[0]
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_store_"))
    try:
        t0 = time.perf_counter()
        write_store(root, args.n, args.d, columns, args.batch, args.tokens)
        write_s = time.perf_counter() - t0
        parts = part_files(root)
        token_files = [str(p).removesuffix(PART_SUFFIX) + TOKENS_SUFFIX for p in parts]
        t0 = time.perf_counter()
        load_features(root)  # the first load hashes every part once and records it
        first_s = time.perf_counter() - t0
        before = median_time(lambda: load_features(root).get(col), args.reps)
        verify_before, record_before = verification_time(parts, root, args.reps, listed_parts(root)[1])
        names = [os.fspath(p) for p in parts]
        stat_before = median_time(lambda: [os.stat(p) for p in names], args.reps)  # the syscalls alone
        present = [t for t in token_files if os.path.exists(t)]
        tokens_check = 0.0
        if present:  # what reading token states adds (FeatureSet.check_token_files), once they are recorded
            v, listed = VerifiedFiles(root), listed_parts(root)[1]
            assert not any(v.check_all(present, listed, seal="tokens"))
            tokens_check = median_time(lambda: v.check_all(present, listed, seal="tokens"), args.reps)
        t0 = time.perf_counter()
        compact_store(root)
        compact_s = time.perf_counter() - t0
        load_features(root).get(col)  # the compact column's first check (one hash)
        after = median_time(lambda: load_features(root).get(col), args.reps)
        folder = root / COMPACT
        verify_after, record_after = verification_time([folder / IDS, column_file(folder, col)], folder, args.reps)
        stored = load_features(root).read(col)  # the column in its stored dtype, in memory
        same = np.array_equal(load_features(root).get(col), stored.astype(np.float32))
        convert = median_time(lambda: to_float32(stored), args.reps)  # what every load of it does last, either layout
        out = {
            "prompts": args.n, "d": args.d, "columns_per_part": len(columns), "parts": len(parts),
            "token_files": sum(os.path.exists(p) for p in token_files),
            "store_mb": round(sum(os.path.getsize(p) for p in names + present) / 1e6, 1),
            "write_s": round(write_s, 2), "first_load_s (hashes every part once)": round(first_s, 3),
            "column_load_s parts": round(before, 4), "column_load_s compacted": round(after, 4),
            "speedup": round(before / after, 1), "compact_s": round(compact_s, 2),
            "verification_s parts": round(verify_before, 5),
            "token_files_check_s (when token states are read)": round(tokens_check, 5),
            "verification_pct_of_load parts": round(100 * verify_before / before, 2),
            "stat_only_pct_of_load parts": round(100 * stat_before / before, 2),
            "record_read_pct_of_load parts": round(100 * record_before / before, 2),
            "float32_conversion_s (both layouts)": round(convert, 4),
            "verification_s compacted": round(verify_after, 6),
            "verification_pct_of_load compacted": round(100 * verify_after / after, 2),
            "record_read_pct_of_load compacted": round(100 * record_after / after, 2),
            "same_values": bool(same),
        }
        print(json.dumps(out, indent=1))
        if args.out:
            settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("out", "keep")}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record(out, settings, load0), indent=1) + "\n")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
