"""The selection and every-candidate tables (lengthpred.eval.selection) from chosen train runs, outside a pipeline:
each run folder holds one head's `metrics.json` (`scripts/train.py`'s output), so a reader can table the searches
of separately run heads (e.g. the bench's feature heads rerun into `outputs/bench_extra/heads/`) without the
tables stage picking up other runs of the same head.

    python scripts/selection_tables.py RUN_DIR [RUN_DIR ...] [--out FILE.md]

Validation scores only: nothing here reads test. Seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lengthpred.eval.selection import candidates_table, selection_table


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("run_dirs", type=Path, nargs="+", help="train run folders, each with a metrics.json")
    ap.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    a = ap.parse_args(argv)
    fits = {}
    for d in a.run_dirs:
        f = d / "metrics.json"
        try:
            blob = json.loads(f.read_text()) if f.is_file() else None
        except json.JSONDecodeError:
            blob = None
        if not (isinstance(blob, dict) and "head" in blob and "n_train" in blob):
            print(f"error: {d}: no train metrics.json (scripts/train.py's output)", file=sys.stderr)
            return 2
        if blob["head"] in fits:
            print(f"error: {d}: a second run of head {blob['head']!r}; give one run per head", file=sys.stderr)
            return 2
        fits[blob["head"]] = blob
    tables = [t.to_markdown() for t in (selection_table(fits), candidates_table(fits)) if t is not None]
    text = "\n\n".join(tables)
    print(text)
    if a.out is not None:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
