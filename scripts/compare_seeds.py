"""Compare heads fitted in separate runs on their seed means, paired on the prompts they share
(lengthpred.eval.seed_pairs):

    python scripts/compare_seeds.py --reference probe --split 'indomain/*/test' --out pairs.md \\
        probe=outputs/bench/train/probe proxy_reg=RUN_A,RUN_B proxy_cls=RUN_C/predictions.parquet

Each HEAD=PATH[,PATH...] names a head and the runs (folders holding predictions.parquet, or the files) whose
seed columns are its seeds; a file holding several heads contributes only HEAD's rows. Prints the Markdown
table and writes it (and a CSV beside it) to --out when given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from lengthpred.artefacts import PREDICTIONS
from lengthpred.errors import DataError, LengthpredError
from lengthpred.eval.seed_pairs import compare_seed_means, seed_pairs_markdown


def _read(spec: str) -> tuple[str, list[pd.DataFrame]]:
    head, sep, paths = spec.partition("=")
    if not sep or not head or not paths:
        raise DataError(f"{spec!r}: give each head as HEAD=PATH[,PATH...]")
    frames = []
    for p in paths.split(","):
        f = Path(p) / PREDICTIONS if Path(p).is_dir() else Path(p)
        if not f.is_file():
            raise DataError(f"{head}: no predictions file at {f}")
        frames.append(pd.read_parquet(f))
    return head, frames


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("heads", nargs="+", help="HEAD=PATH[,PATH...]")
    ap.add_argument("--reference", required=True, help="the head every other is paired against")
    ap.add_argument("--split", action="append", default=None, help="fnmatch pattern of the rows' split "
                    "(repeatable; default indomain/*/test, T1's pooled test set)")
    ap.add_argument("--metric", action="append", default=None, help="default: spearman and mae")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the table here (.md) and a .csv beside it")
    args = ap.parse_args(argv)
    try:
        heads = dict(_read(s) for s in args.heads)
        df = compare_seed_means(heads, args.reference, args.split or ["indomain/*/test"],
                                args.metric or ["spearman", "mae"], n_boot=args.n_boot, seed=args.seed)
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = seed_pairs_markdown(df, args.reference)
    print(table, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table)
        df.to_csv(args.out.with_suffix(".csv"), index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
