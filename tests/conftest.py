"""Shared fixtures: the tiny random-weight model and in-process Hydra composition."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

import lengthpred.cli  # noqa: F401  (registers the ${lp.*} resolvers)
from lengthpred.paths import REPO_ROOT, data_dir, default_datasets_root

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
    tests 10x slower. `make test-portable` sets LENGTHPRED_TEST_THREADS to rerun them with more."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("LENGTHPRED_TEST_THREADS", "1")))
    yield
    torch.set_num_threads(n)


def datasets_present() -> bool:
    return (default_datasets_root() / "MANIFEST.json").is_file()


NO_DATASETS = (f"needs the public datasets: {default_datasets_root()} is absent "
               "(../shared/datasets, or run scripts/fetch_datasets.py)")


def pytest_collection_modifyitems(config, items):
    """Tests marked `datasets` skip, with one reason, where the datasets are absent, except under CI=true: there
    a missing folder would let CI pass with every data test skipped, so the run stops instead."""
    needing = [item for item in items if item.get_closest_marker("datasets")]
    if not needing or datasets_present():
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise pytest.UsageError(f"CI=true but {len(needing)} tests would skip: {NO_DATASETS}")
    for item in needing:
        item.add_marker(pytest.mark.skip(reason=NO_DATASETS))


@pytest.fixture(scope="session")
def demo_splits_dir(tmp_path_factory) -> Path:
    """The demo splits: the prepared ones under data/splits/demo, else built once from the datasets (≈10 s, as
    in CI). Tests using it need the `datasets` marker."""
    built = data_dir() / "splits" / "demo"
    if (built / "splits.json").is_file():
        return built
    from lengthpred.stages.data import prepare

    tmp = tmp_path_factory.mktemp("demo_splits")
    out = tmp / "splits"
    prepare(compose_cfg([f"data.out_dir={out}"], tmp))
    return out
