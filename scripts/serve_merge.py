"""Merge stored serve runs that pair (same profile, pool and draw) into one folder:

    python scripts/serve_merge.py [--replace] OUT RUN_DIR RUN_DIR [...]

A run stored in two folders is refused; with --replace the last folder's copy is kept (a repeat rerun because
something disturbed the first), and OUT/serve.json lists what it replaced.

then `python scripts/serve.py experiment=demo serve.resimulate=OUT` tables them together (lengthpred.serve.merge).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lengthpred.errors import LengthpredError
from lengthpred.serve.merge import merge_runs


def main(argv: list[str]) -> int:
    replace = "--replace" in argv
    argv = [a for a in argv if a != "--replace"]
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        out = merge_runs([Path(a) for a in argv[1:]], Path(argv[0]), replace=replace)
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"merged {len(argv) - 1} serve run folders into {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
