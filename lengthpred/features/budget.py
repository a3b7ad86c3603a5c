"""How large a feature store will be, whether the disk holds it, and the default feature set for large models.

- `store_bytes(columns, dtype, n_prompts, token_layers, d, n_tokens)`: the pooled columns plus the token-level
  states, in the storage dtype (the estimate `extract_features` prints before its first forward).
- `check_space(root, need)`: a store that will not fit the free space of its folder is refused in one line,
  before any work.
- `trim_for_model(settings, n_layers, d)`: the default feature set (`layers: all`, every pool and five fusions,
  token-level states of layer 20) is 2.4 MB a prompt for an 8B model (243 GB per 100k prompts). For a model
  whose default set exceeds `LARGE_BYTES` a prompt, `layers: all` becomes every `LAYER_STRIDE`-th hidden_states
  index plus the last, the fusions `TRIMMED_FUSED`, and no token-level layer; an explicit list of layers, fusions
  or token layers is kept as given, and `features.trim=false` keeps everything.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from pathlib import Path

from lengthpred.errors import DataError
from lengthpred.features.settings import FeatureSettings

BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
LARGE_BYTES = 512 * 1024  # per prompt: the embedded 135M model's default set is 0.31 MB
LAYER_STRIDE = 4
TRIMMED_FUSED = ("mix0.5", "prod")
DEFAULT_FUSED = ("mix0.25", "mix0.5", "mix0.75", "mix1.0", "prod")  # conf/features/default.yaml
DISK_MARGIN = 1.05  # headroom over the estimate (manifests, listings, the verification record)


def store_bytes(columns: Mapping[str, int], dtype: str, n_prompts: int, *, token_layers: int = 0, d: int = 0,
                n_tokens: int = 0) -> int:
    """Bytes of a store: `columns` ({name: width}) per prompt, plus `token_layers` states of width d and three
    float32 per-token scalars (entropy, attention, span) for `n_tokens` prompt tokens."""
    size = BYTES[dtype]
    pooled = sum(int(w) for w in columns.values()) * size * n_prompts
    tokens = (token_layers * d * size + 3 * 4) * n_tokens if token_layers else 0
    return pooled + tokens


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


def free_bytes(folder: Path) -> int:
    """Free bytes where `folder` is (or its nearest existing parent)."""
    p = Path(folder)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def check_space(root: Path, need: int) -> None:
    """A DataError naming `root` when `need` bytes (with a margin) exceed its free space."""
    free = free_bytes(root)
    if need * DISK_MARGIN > free:
        raise DataError(f"not enough disk space for the feature store at {root}: it needs about {human(need)}, "
                        f"{human(free)} are free; free space, set paths.data_dir elsewhere, or store fewer columns "
                        f"(features.layers / features.fused / features.token_layers)")


def default_bytes_per_prompt(settings: FeatureSettings, n_layers: int, d: int) -> int:
    """Pooled bytes a prompt under `settings` with `layers: all` resolved for a model of `n_layers` and width d."""
    n_idx = n_layers + 1 if settings.layers == "all" else len(settings.layers)
    return n_idx * len(settings.pool_names) * d * BYTES[settings.dtype]


def trim_for_model(settings: FeatureSettings, n_layers: int, d: int) -> tuple[FeatureSettings, str | None]:
    """(settings, what was trimmed in words) for a model of `n_layers` decoder layers and width `d` (module
    docstring); (settings, None) when nothing was."""
    if settings.layers != "all" or default_bytes_per_prompt(settings, n_layers, d) <= LARGE_BYTES:
        return settings, None
    layers = tuple(sorted({*range(0, n_layers + 1, LAYER_STRIDE), n_layers}))
    fused = tuple(f for f in settings.fused if f in TRIMMED_FUSED) if settings.fused == DEFAULT_FUSED \
        else settings.fused
    token_layers = () if settings.token_layers == (20,) else settings.token_layers  # the default's layer 20
    trimmed = dataclasses.replace(settings, layers=layers, fused=fused, token_layers=token_layers)
    before = default_bytes_per_prompt(settings, n_layers, d)
    after = default_bytes_per_prompt(trimmed, n_layers, d)
    said = [f"layers all -> {list(layers)}"]
    if fused != settings.fused:
        said.append(f"fused {list(settings.fused)} -> {list(fused)}")
    if token_layers != settings.token_layers:
        said.append(f"token_layers {list(settings.token_layers)} -> []")
    return trimmed, (f"a large model ({n_layers} layers, d={d}): the default feature set is trimmed from "
                     f"{human(before)} to {human(after)} a prompt ({'; '.join(said)}); features.trim=false keeps "
                     "every layer")


__all__ = ["check_space", "default_bytes_per_prompt", "free_bytes", "human", "store_bytes", "trim_for_model"]
