"""The simulate stages' request pools (scripts/simulate.py, simulate_traces.py, simulate_batching.py): the
heads' predictions files with each prompt's sampled lengths and prompt token count from the config's
targets (`lengthpred.stages.targets.request_targets`). Imports nothing heavy (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lengthpred.sched import sources
from lengthpred.sched.head_pool import has_predictions
from lengthpred.sched.pool import LengthSource
from lengthpred.stages.targets import request_targets

__all__ = ["has_predictions", "load_head_pool", "request_targets"]


def load_head_pool(cfg: Any, path: str | Path, *, split: str | None = None, heads: list[str] | None = None,
                   samples: bool = True, prompt_tokens: int = 128) -> LengthSource:
    """The heads' test prompts (`sources.from_predictions`), each with its sampled lengths and prompt token
    count from the targets when `samples` (else its y_true and `prompt_tokens`)."""
    drawn, tokens = request_targets(cfg) if samples else (None, None)
    return sources.from_predictions(path, split=split, heads=heads,
                                    prompt_tokens=tokens if tokens is not None else prompt_tokens, samples=drawn)
