"""lengthpred: LLM output-length prediction from the serving model's own prefill."""

__version__ = "0.1.0"
