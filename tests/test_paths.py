"""Roots a user controls (lengthpred/paths.py): runs write under `$LENGTHPRED_HOME`, else the checkout the
working directory is in, else the package's checkout, else the working directory (tests/test_paths_install.py:
a regular install); committed files stay the checkout's."""

from __future__ import annotations

from pathlib import Path

from lengthpred import paths
from tests.conftest import compose_cfg


def test_the_home_is_the_env_var_else_a_checkout_else_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.HOME_ENV, raising=False)
    monkeypatch.chdir(paths.REPO_ROOT / "lengthpred" / "stages")  # deep inside the checkout: its root
    assert paths.home() == paths.REPO_ROOT and paths.data_dir() == paths.REPO_ROOT / "data"
    assert paths.reference_dir() == paths.REPO_ROOT / "data" / "reference"
    monkeypatch.chdir(tmp_path)  # outside any checkout, this (PYTHONPATH / editable) package's checkout
    assert paths.home() == paths.REPO_ROOT and paths.resolve("x/y") == paths.REPO_ROOT / "x" / "y"
    monkeypatch.setattr(paths, "CHECKOUT", None)  # no checkout at all (a regular install): the working directory
    assert paths.home() == tmp_path.resolve() and paths.resolve("x/y") == tmp_path.resolve() / "x" / "y"
    monkeypatch.undo()
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path / "h"))
    monkeypatch.chdir(paths.REPO_ROOT)  # the variable wins, even inside the checkout
    assert paths.home() == (tmp_path / "h").resolve()
    assert paths.reference_dir() == paths.REPO_ROOT / "data" / "reference"


def test_a_checkout_is_recognised_by_its_configs_and_package(tmp_path):
    assert paths.is_checkout(paths.REPO_ROOT) and paths.enclosing_checkout(paths.REPO_ROOT / "conf") == paths.REPO_ROOT
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text("")
    assert not paths.is_checkout(tmp_path) and paths.enclosing_checkout(tmp_path / "conf") is None


def test_the_config_roots_follow_the_home(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path))
    cfg = compose_cfg([])
    assert Path(cfg.paths.data_dir) == tmp_path.resolve() / "data"
    assert Path(cfg.paths.outputs_dir) == tmp_path.resolve() / "outputs"
    assert Path(cfg.paths.reference_dir) == paths.REPO_ROOT / "data" / "reference"  # still the committed traces
    assert Path(cfg.eval.reference).is_relative_to(paths.REPO_ROOT / "data" / "reference")
    monkeypatch.delenv(paths.HOME_ENV)
    cfg = compose_cfg([f"paths.data_dir={tmp_path / 'd'}"])  # a data_dir set by hand keeps its references
    assert Path(cfg.paths.reference_dir) == tmp_path / "d" / "reference"


def test_a_checkout_run_with_another_clones_package_writes_into_itself(tmp_path, monkeypatch):
    """The reported case: this package (another clone's editable install) run from inside a second clone."""
    monkeypatch.delenv(paths.HOME_ENV, raising=False)
    other = tmp_path / "other"
    (other / "conf").mkdir(parents=True)
    (other / "conf" / "config.yaml").write_text("")
    (other / "lengthpred").mkdir()
    (other / "lengthpred" / "paths.py").write_text("")
    monkeypatch.chdir(other / "conf")
    assert paths.home() == other.resolve() and paths.data_dir() == other.resolve() / "data"
    assert paths.reference_dir() == other.resolve() / "data" / "reference"  # that clone's committed traces
    assert paths.REPO_ROOT != other.resolve()
