"""Every stored serve experiment on one page (lengthpred.serve.summary): per folder, the workload, whether its
calibration passed, each policy's paired gain over FCFS and over prefill-first FCFS with its 95% interval
over repeats, how far leaving one request out moves each gain over FCFS, and per predicting arm the decodes that
yielded and the predictions' Spearman with the answers:

    python scripts/serve_summary.py RUN_DIR [RUN_DIR ...] [--out FILE.md]

A folder split in parts run on one profile (a/, b/) is merged first. Reads only the stored runs' statistics
and requests (seconds, no engine and no replay; the leave-one-out table about 10 s a folder on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lengthpred.errors import LengthpredError
from lengthpred.serve.summary import load_folder, loo_table, predictor_table, summary_table
from lengthpred.serve.tables_cli import emit


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("run_dirs", type=Path, nargs="+", help="serve run folders (scripts/serve.py's output)")
    ap.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    a = ap.parse_args(argv)
    try:
        folders = [load_folder(d, requests=True) for d in a.run_dirs]
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = "\n\n".join(f"**Paired gains over {name}** (95% interval over repeats, or n repeats: too few)\n\n"
                       + summary_table(folders, base)
                       for base, name in (("fcfs", "FCFS"), ("fcfs-prefill-first", "prefill-first FCFS")))
    text += ("\n\n**How far one request moves each gain over FCFS** (the gain, then its lowest and highest value "
             "when one request of one repeat is left out of every policy's run of that repeat)\n\n" + loo_table(folders)
             + "\n\n**The arms that predicted or served prefills first** (decodes that yielded their slot after the "
             "prefill; how the predictions ranked the answers served)\n\n" + predictor_table(folders))
    return emit(text, a.out)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
