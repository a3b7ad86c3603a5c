"""Prompt collection: source registry, selection, splits, trace loader (see docs/DESIGN.md)."""

from lengthpred.data import castillo as _castillo  # noqa: F401  (registers the castillo:<model> sources)
from lengthpred.data.build import load_prompts, load_splits, prepare
from lengthpred.data.records import prompt_id
from lengthpred.data.sources import SOURCES

__all__ = ["SOURCES", "load_prompts", "load_splits", "prepare", "prompt_id"]
