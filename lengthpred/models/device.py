"""Where a model runs: the config's `device`, the launcher's `LOCAL_RANK`, what `dtype: auto` becomes there, and
whether the weights are spread over several GPUs (`device_map`).

- `resolve_device(name)`: `cpu`, `cuda`, `cuda:<i>`, `mps` or `auto` (CUDA when there is one, else the CPU) as a
  `torch.device`. Under torchrun / accelerate launch (`LOCAL_RANK` set), `cuda` is this process's own GPU,
  `cuda:<LOCAL_RANK>`. An unknown name, CUDA asked for where there is none, and an index (or `LOCAL_RANK`) past
  the visible devices are one-line `ConfigError`s, raised before any model or data is loaded.
- `resolve_dtype(name, device)`: `auto` is bfloat16 on a GPU that has it, float16 on an older GPU, float32 on the
  CPU (where half precision is slow and, for float16, lossy); any other name is kept.
- `choose_device_map(requested, device, weights_bytes, free_bytes, n_gpus)`: what `from_pretrained` gets.
  None on the CPU (load, then `.to`); on one GPU `{"": device}` (the weights load straight onto it, never
  whole into host memory); `"auto"` (accelerate spreads the layers over every visible GPU) when asked, or when
  the weights do not fit the GPU's free memory and there are other GPUs.

torch is imported where a device is resolved, so the config checks that call this stay light.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from lengthpred.errors import ConfigError

log = logging.getLogger(__name__)

DEVICE_NAMES = ("cpu", "cuda", "cuda:<i>", "mps", "auto")
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's strategies
_CUDA = re.compile(r"^cuda(?::(\d+))?$")
# the share of a GPU's free memory the weights may take before they are spread over several GPUs: the
# rest holds activations, the KV cache and the capture's buffers
WEIGHTS_SHARE = 0.8


def local_rank() -> int | None:
    """`LOCAL_RANK` as torchrun and accelerate set it (None outside a launcher)."""
    value = os.environ.get("LOCAL_RANK")
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"LOCAL_RANK={value!r} is not an integer") from None


def _visible() -> str:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f" (CUDA_VISIBLE_DEVICES={vis})" if vis is not None else ""


def resolve_device(name: Any = "cpu") -> Any:
    """The `torch.device` a config's `device` names, with this process's `LOCAL_RANK` applied (module docstring)."""
    import torch

    text = str(name if name is not None else "cpu").strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return torch.device("cpu")
    if text == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ConfigError("device=mps but this torch build sees no Apple GPU: use device=cpu")
        return torch.device("mps")
    m = _CUDA.match(text)
    if m is None:
        raise ConfigError(f"device={name!r}: not a device name; use one of {list(DEVICE_NAMES)}")
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else "no visible CUDA device"
        raise ConfigError(f"device={name!r} but this machine has {build}{_visible()}: use device=cpu, "
                          "or install a CUDA build of torch on a GPU machine")
    n = torch.cuda.device_count()
    rank = local_rank()
    if m.group(1) is not None:
        index = int(m.group(1))
        if index >= n:
            raise ConfigError(f"device={name!r} but only {n} CUDA device(s) are visible{_visible()}")
        return torch.device("cuda", index)
    if rank is None:
        return torch.device("cuda", 0)
    if rank >= n:
        raise ConfigError(f"LOCAL_RANK={rank} but only {n} CUDA device(s) are visible{_visible()}: start at most "
                          f"{n} processes per node (torchrun --nproc-per-node {n})")
    return torch.device("cuda", rank)


def resolve_dtype(name: str, device: Any) -> str:
    """`auto` → bfloat16 (a GPU with it), float16 (an older GPU) or float32 (CPU and others); other names kept."""
    if name != "auto":
        return name
    if getattr(device, "type", str(device)) != "cuda":
        return "float32"
    import torch

    try:
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    except (AssertionError, RuntimeError):  # no CUDA after all: never reached after resolve_device
        return "float16"


def weights_bytes(checkpoint: str | Path) -> int | None:
    """Bytes of a local checkpoint's weight files (safetensors, else .bin); None for a hub id or no such folder."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        return None
    files = list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))
    return sum(f.stat().st_size for f in files) if files else None


def free_gpu_bytes(device: Any) -> int | None:
    """Free memory of a CUDA device (None elsewhere)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def choose_device_map(requested: str | None, device: Any, *, weights: int | None = None, free: int | None = None,
                      n_gpus: int = 1) -> Any:
    """What `from_pretrained(device_map=...)` gets (module docstring); None: load, then move with `.to`."""
    kind = getattr(device, "type", str(device))
    if requested is not None:
        if requested not in DEVICE_MAPS:
            raise ConfigError(f"model.device_map={requested!r}: use null or one of {list(DEVICE_MAPS)}")
        if kind != "cuda":
            raise ConfigError(f"model.device_map={requested!r} spreads a model over GPUs, but device={device}")
        if local_rank() is not None:
            raise ConfigError(f"model.device_map={requested!r} under a launcher (LOCAL_RANK is set): each process "
                              "would spread the model over every GPU; use one process per node, or device_map=null")
        return requested
    if kind != "cuda":
        return None
    if weights is not None and free is not None and weights > WEIGHTS_SHARE * free and n_gpus > 1 \
            and local_rank() is None:
        log.warning("the weights (%.1f GB) do not fit %s (%.1f GB free): spreading them over %d GPUs "
                    "(device_map=auto)", weights / 1e9, device, free / 1e9, n_gpus)
        return "auto"
    return {"": str(device)}


def input_device(model: Any) -> Any:
    """Where a model's inputs go: its first parameter's device (the embedding's, under a device map)."""
    return next(model.parameters()).device
