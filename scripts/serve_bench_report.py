"""Tables of `vllm bench serve` campaign folders (scripts/serve_bench.py): each arm's statistics, the gains over
stock FCFS paired by repeat (median per-repeat gain, the exact sign-flip p, the pooled ratio and its range with one
repeat left out), what the plugin did, and the per-repeat numbers:

    .venv/bin/python scripts/serve_bench_report.py data/reference/smollm2-135m/vllm_bench/load095_b1 [...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lengthpred.errors import LengthpredError
from lengthpred.serve.tables_cli import emit
from lengthpred.serve.vllm_bench_report import BASELINE, report


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("folders", type=Path, nargs="+", help="campaign cell folders")
    ap.add_argument("--baseline", default=BASELINE, help=f"the arm gains are paired against (default {BASELINE})")
    ap.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    a = ap.parse_args(argv)
    try:
        text = report(a.folders, a.baseline)
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return emit(text, a.out)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
