"""The heads' test prompts as a request pool: predictions files plus each prompt's sampled lengths.

The pool the simulate stage draws T5's requests from, and the pool trace requests are matched into
(`lengthpred.sched.head_mapping`) and static batches are formed from (`lengthpred.sched.batching`). Reads
the train stage's `predictions.parquet` files and the targets the heads were fitted on; imports nothing
heavy until asked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lengthpred.sched import sources
from lengthpred.sched.pool import LengthSource

log = logging.getLogger("lengthpred.sched")

__all__ = ["has_predictions", "load_head_pool", "request_targets"]


def request_targets(cfg: Any) -> tuple[dict[str, list[int]], dict[str, int] | None]:
    """Each prompt's sampled lengths (capped ones as the cap) and prompt token count, from the targets of
    `lengthpred.targets.load_targets` (merged generations, else the reference trace); counts are None when
    that source does not record them."""
    from lengthpred.targets import load_targets, read_reference

    targets = load_targets(cfg)
    samples = {str(i): [int(x) for x in v] for i, v in targets["lengths"].items()}
    where = Path(targets.attrs["source"])
    if where.is_file():
        rows = read_reference(where)[0]
    else:
        from lengthpred.generate import load_generations

        rows = load_generations(where).to_pandas()
    if "prompt_tokens" not in rows.columns:
        log.warning("%s records no prompt token counts", where)
        return samples, None
    tokens = rows.groupby(rows["id"].astype(str))["prompt_tokens"].first()  # the same for every sample
    return samples, {str(i): int(n) for i, n in tokens.items()}


def has_predictions(path: str | Path) -> bool:
    """A predictions.parquet file, or a directory holding at least one."""
    p = Path(path)
    return p.is_file() or (p.is_dir() and any(p.rglob("predictions.parquet")))


def load_head_pool(cfg: Any, path: str | Path, *, split: str | None = None, heads: list[str] | None = None,
                   samples: bool = True, prompt_tokens: int = 128) -> LengthSource:
    """The heads' test prompts (`sources.from_predictions`), each with its sampled lengths and prompt token
    count from the targets when `samples` (else its y_true and `prompt_tokens`)."""
    drawn, tokens = request_targets(cfg) if samples else (None, None)
    return sources.from_predictions(path, split=split, heads=heads,
                                    prompt_tokens=tokens if tokens is not None else prompt_tokens, samples=drawn)
