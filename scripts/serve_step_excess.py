"""How much longer than the profile the engine's steps ran after a completion, per stored serve folder and policy
(lengthpred.lab.step_excess): the median measured − modelled step time (ms) of decode and prefill steps after
a completion and after none. A predictor that holds the cores at each completion shows as a gap the policies
without one do not have.

    python scripts/serve_step_excess.py RUN_DIR [RUN_DIR ...] [--out FILE.md]

A folder split in parts run on one profile (a/, b/) is merged first. Reads stored steps only: seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lengthpred.errors import LengthpredError
from lengthpred.lab.step_excess import excess_table, step_excess
from lengthpred.lab.ttft_anatomy import load_stored
from lengthpred.serve.summary import serve_folder
from lengthpred.serve.tables_cli import emit


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("run_dirs", type=Path, nargs="+", help="serve run folders (scripts/serve.py's output)")
    ap.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    a = ap.parse_args(argv)
    folders = []
    try:
        for d in a.run_dirs:
            with serve_folder(d) as run:
                st = load_stored(run)
            folders.append((d.name, step_excess(st.requests, st.steps, st.profile, st.settings.fit_skip)))
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return emit("**Median step time over the profile (ms), after a completion and after none**\n\n"
                + excess_table(folders), a.out)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
