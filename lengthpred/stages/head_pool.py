"""The heads' test prompts as a request pool, shared by the simulate, traces and batching stages: the train
stage's predictions files under `sched.source.predictions_path` (found by `lengthpred.stages.locations`, each
head from its newest file) with each prompt's sampled lengths and prompt token count from the config's targets
(`lengthpred.stages.targets.request_targets`). Imports nothing heavy (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lengthpred.sched.sweep import sources
from lengthpred.sched.sweep.pool import LengthSource
from lengthpred.stages.locations import predictions_files
from lengthpred.stages.targets import request_targets


def has_predictions(path: str | Path | None) -> bool:
    """A predictions file, or a folder holding at least one."""
    return bool(path) and bool(predictions_files(path))


def load_head_pool(
    cfg: Any,
    path: str | Path,
    *,
    split: str | None = None,
    heads: list[str] | None = None,
    samples: bool = True,
    prompt_tokens: int = 128,
) -> LengthSource:
    """The heads' test prompts (`sources.from_predictions`), each with its sampled lengths and prompt token
    count from the targets when `samples` (else its y_true and `prompt_tokens`)."""
    drawn, tokens = request_targets(cfg) if samples else (None, None)
    return sources.from_predictions(
        path,
        split=split,
        heads=heads,
        prompt_tokens=tokens if tokens is not None else prompt_tokens,
        samples=drawn,
    )


def source_head_pool(cfg: Any, heads: list[str] | None = None) -> LengthSource | None:
    """`sched.source`'s heads' pool (`heads`, else `sched.source.heads`, else every head), None when there is no
    predictions file under `sched.source.predictions_path` yet."""
    s = cfg.sched.source
    if not has_predictions(s.predictions_path):
        return None
    return load_head_pool(
        cfg,
        s.predictions_path,
        split=s.split,
        heads=heads or (list(s.heads) if s.heads else None),
        samples=bool(s.samples),
        prompt_tokens=int(s.prompt_tokens),
    )
