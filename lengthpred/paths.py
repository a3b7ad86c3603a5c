"""Where things live: the checkout (committed files) and the home (what runs write).

- `REPO_ROOT`, the checkout: the folder that holds the committed files the package reads (conf/, scripts/,
  data/reference/). The package's parent folder when the package sits in a checkout (an editable or a
  PYTHONPATH install), else the checkout the working directory is in (a regular install run from a clone).
- `home()`: where runs write `data/` (prepared splits, generations, feature stores, models) and `outputs/`:
  `$LENGTHPRED_HOME` when set, else the checkout the working directory is in, else the package's own
  checkout (an editable install run from another folder keeps one data folder), else the working directory
  (a regular install). So a run never writes beside `site-packages`, nor into another clone whose venv it
  borrows.
- `CONF_DIR`: the Hydra configs, shipped in the package (`lengthpred/conf`; a checkout's `conf/` is a symlink
  to it), so an installed wheel composes them as `pkg://lengthpred.conf`.
- `reference_dir(data_dir)`: the committed reference traces: `<data_dir>/reference` when the home is a
  checkout (as in the default set-up), else the package's checkout's `data/reference`.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "LENGTHPRED_HOME"
PACKAGE_PARENT = Path(__file__).resolve().parent.parent
# the Hydra configs, inside the package so an installed wheel has them (a checkout's conf/ links here)
CONF_DIR = Path(__file__).resolve().parent / "conf"


def is_checkout(folder: Path) -> bool:
    """Whether `folder` is a lengthpred checkout (its configs and its package side by side)."""
    return (folder / "conf" / "config.yaml").is_file() and (folder / "lengthpred" / "paths.py").is_file()


def enclosing_checkout(start: str | Path) -> Path | None:
    """The checkout that holds `start` (itself or a parent folder), None outside any."""
    here = Path(start).resolve()
    return next((p for p in (here, *here.parents) if is_checkout(p)), None)


def _checkout() -> Path | None:
    return PACKAGE_PARENT if is_checkout(PACKAGE_PARENT) else enclosing_checkout(Path.cwd())


CHECKOUT = _checkout()
# the committed files' folder; without any checkout (an installed package run outside a clone) the package's
# parent, where conf/ is missing: the scripts and configs come with a clone of the repository
REPO_ROOT = CHECKOUT or PACKAGE_PARENT


def home() -> Path:
    """`$LENGTHPRED_HOME`, else the checkout the working directory is in, else the package's checkout, else
    the working directory."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser().resolve()
    cwd = Path.cwd()
    return enclosing_checkout(cwd) or CHECKOUT or cwd.resolve()


def data_dir() -> Path:
    """`<home>/data`: prepared splits, generations, feature stores and models (`paths.data_dir`)."""
    return home() / "data"


def reference_dir(data: str | Path | None = None) -> Path:
    """The committed reference traces: `<data>/reference` (data: `data_dir()` unless given) when the home is a
    checkout or no checkout is known, else the package's checkout's `data/reference`."""
    if CHECKOUT is None or enclosing_checkout(home()) is not None:
        return Path(data or data_dir()) / "reference"
    return CHECKOUT / "data" / "reference"


def default_datasets_root() -> Path:
    """`../shared/datasets` beside the checkout when it exists, else `<home>/data/datasets` (fetch_datasets.py)."""
    shared = (CHECKOUT or home()).parent / "shared" / "datasets"
    return shared if shared.is_dir() else data_dir() / "datasets"


def resolve(path: str | Path) -> Path:
    """A path from config: absolute as given, relative to the home otherwise."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else home() / p
