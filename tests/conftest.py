"""Shared fixtures: the tiny random-weight model and in-process Hydra composition."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

import lengthpred.cli  # noqa: F401  (registers the ${lp.*} resolvers)
from lengthpred.paths import REPO_ROOT

CONF_DIR = str(REPO_ROOT / "conf")


def compose_cfg(overrides: list[str] | None = None, tmp_path: Path | None = None) -> DictConfig:
    """Compose the real config in-process with the logger off and outputs under tmp_path."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        # the default token-level layer (20) is the embedded model's; the tiny model has hidden_states 0..4
        tiny = ["features.token_layers=[]"] if "model=tiny" in (overrides or []) else []
        cfg = compose(config_name="config", overrides=["logger=disabled", *tiny, *(overrides or [])])
    if tmp_path is not None:
        with open_dict(cfg):
            cfg.paths.output_dir = str(tmp_path)
    return cfg


@pytest.fixture(scope="session")
def tiny_model():
    from lengthpred.models.tiny import build_tiny_llama

    return build_tiny_llama(seed=0)


@pytest.fixture(scope="session")
def tokenizer():
    from lengthpred.models.serving import serving_tokenizer

    return serving_tokenizer()


@pytest.fixture(scope="module")
def one_torch_thread():
    """The tiny model's ops are too small for two threads; on 2 shared cores OpenMP spin-waits made
    tests 10x slower."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
