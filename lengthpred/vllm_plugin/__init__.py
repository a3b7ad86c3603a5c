"""lengthpred inside vLLM: placeholder."""
