"""Serving models (causal LMs whose prefill we read) and proxy encoders.

`specs` (what a model is, the embedded defaults) → `checkpoint` (files on disk, tokenizers) → `tiny` (the
random-weight test model) → `serving` (`load_causal_lm`). Importing the package is light: torch comes with
`lengthpred.models.serving` and `lengthpred.models.tiny`.
"""

from lengthpred.models.checkpoint import load_tokenizer, serving_tokenizer
from lengthpred.models.specs import ModelSpec

__all__ = ["ModelSpec", "load_tokenizer", "serving_tokenizer"]
