"""The files a stored serve run folder (`scripts/serve.py`'s output) must hold before anything reads it."""

from __future__ import annotations

from pathlib import Path

from lengthpred.errors import DataError

RUN_FILES = ("serve.json", "profile.json", "serve_runs.csv", "serve_requests.parquet", "serve_steps.parquet")


def require_run_folder(run_dir: Path, label: str = "") -> None:
    """DataError naming the missing files when `run_dir` is not a serve run folder; `label` prefixes the path
    (e.g. the setting that named it)."""
    missing = [f for f in RUN_FILES if not (run_dir / f).is_file()]
    if missing:
        raise DataError(f"{label}{run_dir}: not a serve run folder (missing {', '.join(missing)})")
