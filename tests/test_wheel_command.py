"""The built wheel is a tool: installed (not editable) into a fresh venv, its `lengthpred` console script runs
`--help` and stages on the tiny model from a folder outside any checkout, composing the configs shipped inside the
package (`pkg://lengthpred.conf`). Twice: with the dependencies borrowed from this interpreter's site-packages (a .pth
line: fast, nothing downloaded), and pip-installed with every dependency into an empty venv from the configured
package indexes (`installed_bin`), as a cluster node would."""

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


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(paths.REPO_ROOT / name, src / name)
    shutil.copytree(paths.REPO_ROOT / "lengthpred", src / "lengthpred",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "wheels"), str(src)],
                   check=True, cwd=src, capture_output=True)
    return next((tmp / "wheels").glob("lengthpred-*.whl"))


@pytest.fixture(scope="module")
def lengthpred_bin(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(tmp)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    return env_dir / "bin" / "lengthpred"


@pytest.fixture(scope="module")
def installed_bin(tmp_path_factory) -> Path:
    """The wheel pip-installed into an empty venv with every dependency it declares, from the package indexes
    pip is configured with, pinned by the CPU lock (what `pip install lengthpred` does on a cluster node): ≈1.5 min
    and 1.8 GB. Skipped only where no index answers (one small download is tried first), except under CI, where
    that fails too; once an index answers, a failing install is a failure."""
    tmp = tmp_path_factory.mktemp("installed")
    lock = paths.REPO_ROOT / "requirements" / "cpu.lock"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    probe = subprocess.run([*pip, "download", "--no-deps", "-c", str(lock), "-d", str(tmp / "probe"), "safetensors"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:  # only an unreachable index skips; a failing install below always fails
        if os.environ.get("CI"):
            pytest.fail(f"CI needs a package index for the wheel's dependencies: {probe.stderr[-1500:]}")
        pytest.skip(f"no package index reachable to install the wheel's dependencies: {probe.stderr[-300:]}")
    wheel = build_wheel(tmp)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    r = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(lock), str(wheel)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"pip could not install the wheel with its dependencies: {r.stderr[-1500:]}"
    return env_dir / "bin" / "lengthpred"


def run(cmd: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env[paths.HOME_ENV] = str(home)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_installed_command_runs_stages_outside_a_checkout(lengthpred_bin, tmp_path, tokenizer):
    runs_stages_outside_a_checkout(lengthpred_bin, tmp_path)


def test_a_fresh_install_with_its_dependencies_runs_a_stage(installed_bin, tmp_path, tokenizer):
    site = subprocess.run([str(installed_bin.parent / "python"), "-c", "import torch, sys; print(torch.__file__)"],
                          capture_output=True, text=True, check=True).stdout
    assert site.startswith(str(installed_bin.parent.parent))  # its own torch, nothing borrowed from this venv
    runs_stages_outside_a_checkout(installed_bin, tmp_path)


def runs_stages_outside_a_checkout(lengthpred_bin: Path, tmp_path: Path) -> None:
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
