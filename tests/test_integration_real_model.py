"""Loads the real embedded SmolLM2-135M-Instruct and runs a prefill (≈10 s after the one-time conversion)."""

from __future__ import annotations

import pytest
import torch

from lengthpred.models.serving import load_causal_lm
from lengthpred.models.specs import embedded_proxy_dir, embedded_serving_spec

pytestmark = pytest.mark.integration


def test_real_smollm2_prefill_predicts_sensible_next_token():
    model, tok = load_causal_lm(embedded_serving_spec())
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    assert torch.isfinite(out.logits).all()
    assert len(out.hidden_states) == 31
    # a real instruct model, unlike random weights, starts the answer with "Paris" or "The"
    top = tok.decode(out.logits[0, -1].topk(5).indices).lower()
    assert "paris" in top or "the" in top, top


def test_embedded_proxy_encoder_loads():
    from transformers import AutoModel, AutoTokenizer

    d = embedded_proxy_dir()
    enc = AutoModel.from_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    out = enc(**tok(["a short prompt"], return_tensors="pt"))
    assert out.last_hidden_state.shape[-1] == 384
