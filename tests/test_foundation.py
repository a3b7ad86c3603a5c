from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hydra.utils import instantiate

from lengthpred.cli import parse_shard
from lengthpred.errors import ConfigError, ModelError
from lengthpred.models.serving import ModelSpec, load_causal_lm, load_tokenizer
from lengthpred.paths import REPO_ROOT
from lengthpred.registry import Registry

from .conftest import compose_cfg


def test_registry_unknown_name_lists_valid_ones():
    reg: Registry[int] = Registry("head")
    reg.register("b")(2)
    reg.register("a")(1)
    assert reg.get("a") == 1
    with pytest.raises(ConfigError, match="unknown head 'c'; valid: a, b"):
        reg.get("c")
    with pytest.raises(ValueError):
        reg.register("a")(3)


@pytest.mark.parametrize("text,expected", [(None, (0, 1)), ("0/1", (0, 1)), ("3/4", (3, 4))])
def test_parse_shard(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("bad", ["4/4", "-1/2", "1", "a/b", "0/0"])
def test_parse_shard_rejects(bad):
    with pytest.raises(ConfigError):
        parse_shard(bad)


def test_model_spec_needs_exactly_one_source():
    with pytest.raises(ModelError, match="exactly one"):
        ModelSpec(name="x")
    with pytest.raises(ModelError, match="exactly one"):
        ModelSpec(name="x", path="a", hf_id="b")
    with pytest.raises(ModelError, match="dtype"):
        ModelSpec(name="x", tiny=True, dtype="int3")


def test_missing_embedded_package_is_one_clear_error():
    spec = ModelSpec(name="x", package="no_such_pkg_xyz", gguf_file="m.gguf", cache_dir="data/models/x")
    with pytest.raises(ModelError, match="no_such_pkg_xyz.*make setup"):
        load_tokenizer(spec)


def test_unreadable_model_dir_is_one_clear_error(tmp_path):
    with pytest.raises(ModelError, match="not a readable HF checkpoint"):
        load_causal_lm(ModelSpec(name="x", path=str(tmp_path / "nope")))


@pytest.mark.parametrize("name", ["smollm2-135m", "tiny", "qwen2.5-7b-instruct", "llama-3.1-8b-instruct"])
def test_every_model_option_instantiates(name, tmp_path):
    spec = instantiate(compose_cfg([f"model={name}"], tmp_path).model)
    assert isinstance(spec, ModelSpec) and spec.name == name


@pytest.mark.parametrize("logger", ["wandb", "disabled"])
def test_logger_options_never_need_network(logger, tmp_path):
    cfg = compose_cfg([f"logger={logger}"], tmp_path)
    assert cfg.logger.mode in {"offline", "disabled"}


def test_tiny_model_forward(tiny_model, tokenizer):
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "How long is a piece of string?"}], add_generation_prompt=True,
        return_tensors="pt", return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = tiny_model(input_ids=ids, output_hidden_states=True)
    assert out.logits.shape == (1, ids.shape[1], len(tokenizer))
    assert len(out.hidden_states) == tiny_model.config.num_hidden_layers + 1
    assert torch.isfinite(out.logits).all()


@pytest.mark.slow  # runs a script in a subprocess
def test_unknown_config_value_is_short_error_not_traceback():
    r = subprocess.run(
        [sys.executable, "scripts/prepare_model.py", "model=nope", "logger=disabled"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode != 0
    assert "Could not find 'model/nope'" in r.stderr and "smollm2-135m" in r.stderr
    assert "Traceback" not in r.stderr
