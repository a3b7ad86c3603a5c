"""Where runs write (lengthpred/paths.py): beside the user, never beside the installed package.

The package is built into a wheel, installed (not editable) into a throwaway venv whose own site-packages
holds it, and run from a folder outside any checkout: the prepared prompt set lands under that folder
(or `$LENGTHPRED_HOME`), nothing beside site-packages; run from inside the checkout, the configs and the
committed reference traces are still found there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from lengthpred import paths

pytestmark = pytest.mark.slow

# prepares a tiny trace with the default out_dir (so `<data_dir>/splits/<name>`) and reports where things are
PROBE = r"""
import json, sys
from pathlib import Path
import lengthpred
from lengthpred import paths
from lengthpred.data.build import prepare
rows = [{"prompt": f"question {i}", "length": 10 + i} for i in range(40)]
Path("trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
cfg = json.loads(sys.argv[1])
out = prepare(cfg)
print(json.dumps({"package": lengthpred.__file__, "out": str(out.resolve()), "home": str(paths.home()),
                  "checkout": str(paths.CHECKOUT), "reference": str(paths.reference_dir())}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the package installed from a wheel; the dependencies come from this interpreter's
    site-packages (a .pth line), so nothing is downloaded."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(paths.REPO_ROOT / name, src / name)
    shutil.copytree(paths.REPO_ROOT / "lengthpred", src / "lengthpred",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
                   check=True, cwd=src)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(wheels.glob("lengthpred-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    return python


def _probe(python: Path, cwd: Path, home: Path | None = None) -> dict:
    cfg = {"name": "t", "kind": "trace", "train_path": "trace.jsonl", "test_path": None, "prompt_field": "prompt",
           "length_field": "length", "length_stat": "mean", "domain_field": None, "length_model": "trace",
           "seed": 0, "val_fraction": 0.1, "test_fraction": 0.2, "cross_mix": True, "on_bad_input": "raise",
           "forelen": {"longseq": 0, "rl": 0}}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", paths.HOME_ENV)}
    if home is not None:
        env[paths.HOME_ENV] = str(home)
    r = subprocess.run([str(python), "-c", PROBE, json.dumps(cfg)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_an_installed_package_writes_where_the_user_runs_it(installed, tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    got = _probe(installed, user)
    site = Path(got["package"]).parent.parent
    assert site.is_relative_to(installed.parent.parent), got  # the wheel's copy, not a checkout's
    assert Path(got["out"]) == (user / "data" / "splits" / "t").resolve() and Path(got["home"]) == user.resolve()
    assert not (site / "data").exists() and not (site / "outputs").exists()
    assert got["checkout"] == "None"

    elsewhere = tmp_path / "home"
    got = _probe(installed, user, home=elsewhere)
    assert Path(got["out"]) == (elsewhere / "data" / "splits" / "t").resolve()


def test_run_from_the_checkout_it_finds_the_committed_files(installed, tmp_path):
    """An installed package run inside a clone: the clone is the checkout (conf/, data/reference/); with
    `$LENGTHPRED_HOME` elsewhere the runs write there and the committed reference traces are still the
    clone's. (The probe writes trace.jsonl into the working directory, so the clone here is a copy.)"""
    clone = tmp_path / "clone"
    (clone / "conf").mkdir(parents=True)
    shutil.copy(paths.REPO_ROOT / "conf" / "config.yaml", clone / "conf" / "config.yaml")
    shutil.copytree(paths.REPO_ROOT / "lengthpred", clone / "lengthpred",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    work = clone / "scripts"
    work.mkdir()
    got = _probe(installed, work)
    assert Path(got["checkout"]) == clone.resolve() and Path(got["home"]) == clone.resolve()
    assert Path(got["out"]) == (clone / "data" / "splits" / "t").resolve()

    elsewhere = tmp_path / "home"
    got = _probe(installed, work, home=elsewhere)
    assert Path(got["out"]) == (elsewhere / "data" / "splits" / "t").resolve()
    assert Path(got["reference"]) == (clone / "data" / "reference").resolve()
