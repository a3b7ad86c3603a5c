"""What the serve table scripts share: their arguments (a serve run folder and a speed window), Markdown tables
and writing them out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def md_table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def emit(text: str, out: Path | None) -> int:
    """Print `text` and, given `out`, also write it there; returns the script's exit status (0: done)."""
    print(text)
    if out is not None:
        out.write_text(text + "\n")
    return 0


def folder_args(argv: list[str], description: str) -> tuple[Path, float] | None:
    """(run folder, window seconds) from `argv`; None after a one-line error on stderr (a window that is not a
    positive number of seconds)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("run_dir", type=Path, help="a serve run folder (scripts/serve.py's output)")
    ap.add_argument("--window-s", type=float, default=10.0, help="speed windows, seconds (default 10)")
    a = ap.parse_args(argv)
    if not a.window_s > 0:
        print(f"error: --window-s must be a positive number of seconds, got {a.window_s}", file=sys.stderr)
        return None
    return a.run_dir, a.window_s
