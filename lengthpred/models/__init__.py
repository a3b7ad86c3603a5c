"""Serving models (causal LMs whose prefill we read) and proxy encoders."""

from lengthpred.models.serving import ModelSpec, load_causal_lm, load_tokenizer

__all__ = ["ModelSpec", "load_causal_lm", "load_tokenizer"]
