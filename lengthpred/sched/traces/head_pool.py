"""The heads' test prompts as a request pool: where the train stage's predictions files are.

The pool the simulate stage draws T5's requests from, and the pool trace requests are matched into
(`lengthpred.sched.traces.head_mapping`) and static batches are formed from (`lengthpred.sched.batching.batches`):
`lengthpred.stages.simulate.load_head_pool(cfg, path)` reads the predictions files
(`lengthpred.sched.sweep.sources.from_predictions`) with each prompt's sampled lengths from the config's targets.
"""

from __future__ import annotations

from pathlib import Path

from lengthpred.artefacts import PREDICTIONS

__all__ = ["has_predictions"]


def has_predictions(path: str | Path) -> bool:
    """A predictions.parquet file, or a directory holding at least one."""
    p = Path(path)
    return p.is_file() or (p.is_dir() and any(p.rglob(PREDICTIONS)))
