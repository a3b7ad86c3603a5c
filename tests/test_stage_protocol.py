"""One stage protocol (issue 28, item 1): every stage script's body is one call `run_x(cfg, run_dir(cfg))` of a
function in `lengthpred.stages` that takes the composed config and the run's own folder and returns a Path, so
scripts, the pipeline and a notebook call any stage the same way."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PIPELINE = "demo.py"  # the pipeline's own entry: it runs the other scripts, it is no stage


def stage_scripts() -> list[Path]:
    return sorted(p for p in SCRIPTS.glob("*.py") if "@hydra.main" in p.read_text() and p.name != PIPELINE)


def stage_call(script: Path) -> tuple[str, str]:
    """(module, function) of the one call in `main`; fails when main does anything else."""
    tree = ast.parse(script.read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert len(main.body) == 1 and isinstance(main.body[0], ast.Expr), f"{script.name}: main is not one call"
    call = main.body[0].value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name), script.name
    assert ast.dump(call.args[0]) == ast.dump(ast.Name("cfg", ast.Load())) and len(call.args) == 2, script.name
    out = call.args[1]
    assert isinstance(out, ast.Call) and getattr(out.func, "id", None) == "run_dir", f"{script.name}: out is not run_dir(cfg)"
    fn = call.func.id
    module = next(n.module for n in tree.body if isinstance(n, ast.ImportFrom) and fn in {a.name for a in n.names})
    return module, fn


def test_every_stage_script_is_one_call_of_a_stage_function():
    scripts = stage_scripts()
    assert len(scripts) >= 20
    for script in scripts:
        module, fn = stage_call(script)
        assert module.startswith("lengthpred.stages."), f"{script.name}: {module}.{fn} is not a stage function"
        sig = inspect.signature(getattr(importlib.import_module(module), fn))
        params = list(sig.parameters.values())
        assert [p.name for p in params[:2]] == ["cfg", "out"], f"{script.name}: {fn}{sig}"
        assert all(p.default is not inspect.Parameter.empty for p in params[2:]), f"{script.name}: {fn}{sig}"
        assert sig.return_annotation in ("Path", Path), f"{script.name}: {fn} returns {sig.return_annotation}"


def test_a_script_that_does_more_than_the_call_is_caught(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from lengthpred.stages.train import run_train\n"
                   "@hydra.main()\ndef main(cfg):\n    run_train(cfg, run_dir(cfg))\n    print('more')\n")
    with pytest.raises(AssertionError, match="not one call"):
        stage_call(bad)
    bad.write_text("from lengthpred.stages.train import run_train\n"
                   "@hydra.main()\ndef main(cfg):\n    run_train(cfg, cfg.sched.out_dir)\n")
    with pytest.raises(AssertionError, match="not run_dir"):
        stage_call(bad)
