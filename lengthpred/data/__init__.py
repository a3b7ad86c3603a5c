"""Prompt collection: source registry, selection, splits, trace loader (see docs/DESIGN.md).

`lengthpred.stages.data.prepare(cfg)` builds a config's prompt set; `load_prompts` / `load_splits` read it back.
"""

from lengthpred.data import castillo as _castillo  # noqa: F401  (registers the castillo:<model> sources)
from lengthpred.data.build import load_prompts, load_splits
from lengthpred.data.records import prompt_id
from lengthpred.data.sources import SOURCES

__all__ = ["SOURCES", "load_prompts", "load_splits", "prompt_id"]
