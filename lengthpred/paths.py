"""Where things live: the repo root, the data folder and the shared datasets root."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"


def default_datasets_root() -> Path:
    """`../shared/datasets` beside the checkout when it exists, else `data/datasets/` (fetch_datasets.py)."""
    shared = REPO_ROOT.parent / "shared" / "datasets"
    return shared if shared.is_dir() else DATA_DIR / "datasets"


def resolve(path: str | Path) -> Path:
    """A path from config: absolute as given, relative to the repo root otherwise."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else REPO_ROOT / p
