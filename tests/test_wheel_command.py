"""The built wheel is a tool: installed (not editable) into a fresh venv, its `lengthpred` console script runs
`--help` and stages on the tiny model from a folder outside any checkout, composing the configs shipped inside the
package (`pkg://lengthpred.conf`). The dependencies come from this interpreter's site-packages (a .pth line), so
nothing is downloaded; docs/how-to/gpu-and-slurm.md records the same check done with every dependency installed
from the indexes into an empty venv."""

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

pytestmark = pytest.mark.slow  # a wheel build, a venv with pip and three stage processes: ≈1 min


@pytest.fixture(scope="module")
def lengthpred_bin(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(paths.REPO_ROOT / name, src / name)
    shutil.copytree(paths.REPO_ROOT / "lengthpred", src / "lengthpred",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "wheels"), str(src)],
                   check=True, cwd=src, capture_output=True)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next((tmp / "wheels").glob("lengthpred-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    return env_dir / "bin" / "lengthpred"


def run(cmd: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env[paths.HOME_ENV] = str(home)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_installed_command_runs_stages_outside_a_checkout(lengthpred_bin, tmp_path, tokenizer):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "models").symlink_to(paths.data_dir() / "models")  # the tokenizer's cache, made once
    work = tmp_path / "work"
    work.mkdir()
    rows = [{"prompt": f"question {i} " + "word " * i, "length": 10 + i} for i in range(12)]
    (work / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    r = run([str(lengthpred_bin), "--help"], work, home)
    assert r.returncode == 0 and "stages:" in r.stdout and "extract" in r.stdout, r.stderr
    data = ["data=trace", "data.name=t", f"data.train_path={work / 'trace.jsonl'}", "logger=disabled"]
    r = run([str(lengthpred_bin), "prepare_data", *data], work, home)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run([str(lengthpred_bin), "extract", *data, "model=tiny", "features.layers=[0,4]", "features.pools=[last]",
             "features.fused=[]", "features.token_layers=[]"], work, home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "(12 prompts, 3 columns, 0 skipped)" in r.stdout
    store = Path(r.stdout.strip().splitlines()[-1].split()[0])
    assert store.is_relative_to(home / "data" / "features")  # written beside the user, not the package
    bad = run([str(lengthpred_bin), "extract", *data, "device=gpu"], work, home)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: device='gpu'")
    assert bad.stderr.strip().count("\n") == 0
