"""The lab's table scripts (`scripts/serve_ttft_anatomy.py`, `serve_stall_anatomy.py`, `serve_step_excess.py`,
`serve_drift_sources.py`): one stored serve folder summarised, or a one-line error."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lengthpred.errors import DataError
from lengthpred.lab.ttft_anatomy import StoredServe, load_stored
from lengthpred.serve.tables_cli import folder_args


def summarize_folder(argv: list[str], description: str, summarize: Callable[[StoredServe, float], Any]
                     ) -> tuple[Path, float, Any] | None:
    """(run folder, window seconds, `summarize(stored folder, window)`); None after a one-line error on stderr
    (bad arguments, or a folder that is not a serve run)."""
    args = folder_args(argv, description)
    if args is None:
        return None
    run_dir, window_s = args
    try:
        return run_dir, window_s, summarize(load_stored(run_dir), window_s)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
