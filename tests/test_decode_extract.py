"""Decode-time states: the early-stopped forward equals the full forward's hidden state at each checkpoint,
t = 0 equals the prefill store's last-token feature, resume/shards, and the bad inputs of issue 27."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthpred.decode.answers import select_answers
from lengthpred.decode.extract import extract_decode
from lengthpred.decode.forward import hidden_at_layer
from lengthpred.decode.settings import DecodeSettings, checkpoints
from lengthpred.decode.store import load_decode
from lengthpred.errors import ConfigError, DataError
from lengthpred.features import FeatureSettings, extract_features, load_features
from lengthpred.prompting import encode_prompt
from tests.tolerances import assert_close_f32

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.numeric]

PROMPTS = [{"id": f"p{i}", "messages": [{"role": "user", "content": text}]}
           for i, text in enumerate(["Hi", "Write a haiku about autumn.", "What is 17 * 23?", "List three primes.",
                                     "Explain recursion with a story about nesting dolls."])]
N_TERMS = 1024  # the tiny model's widest reduction (its max context): a bound, not a tuning
LENGTHS = [1, 12, 37, 0, 20]  # p3: an empty answer (no checkpoint), p2: capped


def answers_rows(tokenizer, lengths=LENGTHS):
    rng = np.random.default_rng(0)
    rows = []
    for p, n in zip(PROMPTS, lengths, strict=True):
        ids = rng.integers(100, 1000, size=n).tolist()
        pt = len(encode_prompt(tokenizer, p["messages"]))
        for s in (0, 1):  # a second sample that must be ignored
            rows.append(dict(id=p["id"], sample=s, length=n, finish_reason="length" if n == 37 else "stop",
                             token_ids=ids if s == 0 else ids[:1], prompt_tokens=pt))
    return rows


def settings(**kw) -> DecodeSettings:
    return DecodeSettings(**{"layer": 2, "every": 8, "also_at": (4,), "dtype": "float32", "batch_size": 2} | kw)


def test_checkpoints_while_running():
    assert checkpoints(37, 8, (4, 64)).tolist() == [0, 4, 8, 16, 24, 32]
    assert checkpoints(1, 8).tolist() == [0]
    assert checkpoints(0, 8).tolist() == []
    assert checkpoints(37, 8, (4, 64), max_t=16).tolist() == [0, 4, 8, 16]


@pytest.mark.parametrize("layer", [0, 2, 4])
def test_states_equal_full_forward(tiny_model, tokenizer, tmp_path, layer):
    answers = select_answers(answers_rows(tokenizer), 0)
    root = extract_decode(settings(layer=layer), tiny_model, tokenizer, PROMPTS, answers, out_dir=tmp_path,
                          model_name="tiny", progress=False)
    ds = load_decode(root)
    assert ds.ids == ["p0", "p1", "p2", "p4"]  # p3's empty answer is skipped
    assert ds.length.tolist() == [1, 12, 37, 20] and ds.capped.tolist() == [False, False, True, False]
    by_id = {p["id"]: p for p in PROMPTS}
    for k, pid in enumerate(ds.ids):
        a = answers[pid]
        prompt = encode_prompt(tokenizer, by_id[pid]["messages"])
        seq = torch.tensor([prompt + list(a.token_ids)])
        with torch.no_grad():
            full = tiny_model(seq, output_hidden_states=True).hidden_states[layer][0].numpy()
        rows = ds.row_prompt == k
        t = ds.t[rows]
        assert t.tolist() == checkpoints(a.length, 8, (4,)).tolist()
        assert_close_f32(ds.X[rows], full[len(prompt) - 1 + t], N_TERMS, both_float32=True, err_msg=pid)
        assert (ds.remaining[rows] == a.length - t).all() and (ds.remaining[rows] >= 1).all()


def test_t0_state_is_the_prefill_last_token_feature(tiny_model, tokenizer, tmp_path):
    answers = select_answers(answers_rows(tokenizer), 0)
    ds = load_decode(extract_decode(settings(), tiny_model, tokenizer, PROMPTS, answers, out_dir=tmp_path / "d",
                                    model_name="tiny", progress=False))
    fs = load_features(extract_features(
        FeatureSettings(layers=[2], pools=("last",), fused=(), attn_layers=(), token_layers=(), dtype="float32"),
        tiny_model, tokenizer, PROMPTS, out_dir=tmp_path / "f", model_name="tiny", progress=False))
    t0 = ds.t == 0
    assert_close_f32(ds.X[t0], fs.subset(ds.ids).get("hs.L2.last"), N_TERMS, both_float32=True)


def test_early_stop_runs_no_layer_above(tiny_model):
    seen = []
    before = dict(tiny_model.model.layers[1]._forward_hooks)
    hooks = [m.register_forward_hook(lambda m, a, o, i=i: seen.append(i)) for i, m in enumerate(tiny_model.model.layers)]
    try:
        hidden_at_layer(tiny_model, 2, torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long))
    finally:
        for h in hooks:
            h.remove()
    assert seen == [0, 1]
    assert dict(tiny_model.model.layers[1]._forward_hooks) == before  # the stopping hook is gone


def test_shards_resume_and_same_rows(tiny_model, tokenizer, tmp_path):
    answers = select_answers(answers_rows(tokenizer), 0)
    one = load_decode(extract_decode(settings(), tiny_model, tokenizer, PROMPTS, answers, out_dir=tmp_path / "a",
                                     model_name="tiny", progress=False))
    kw = dict(out_dir=tmp_path / "b", model_name="tiny", progress=False)
    extract_decode(settings(), tiny_model, tokenizer, PROMPTS, answers, shard=(0, 2), **kw)
    with pytest.raises(DataError, match="incomplete"):
        load_decode(tmp_path / "b")
    extract_decode(settings(), tiny_model, tokenizer, PROMPTS, answers, shard=(1, 2), **kw)
    two = load_decode(tmp_path / "b")
    assert two.ids == one.ids and (two.t == one.t).all()
    assert_close_f32(two.X, one.X, N_TERMS, both_float32=True)
    parts = sorted((tmp_path / "b" / "parts").glob("*.safetensors"))
    mtimes = [p.stat().st_mtime_ns for p in parts]
    extract_decode(settings(), tiny_model, tokenizer, PROMPTS, answers, **kw)  # resume: nothing to do
    assert [p.stat().st_mtime_ns for p in parts] == mtimes


def test_bad_inputs_one_line_each(tiny_model, tokenizer, tmp_path):
    with pytest.raises(ConfigError, match="interval k must be >= 1"):
        DecodeSettings(every=0)
    rows = answers_rows(tokenizer)
    rows[0]["token_ids"] = None
    with pytest.raises(DataError, match="p0 .*has no token ids"):
        select_answers(rows, 0)
    with pytest.raises(DataError, match="no token_ids column"):
        import datasets

        select_answers(datasets.Dataset.from_list([{"id": "p0", "sample": 0, "length": 3}]), 0)
    answers = select_answers(answers_rows(tokenizer), 0)
    with pytest.raises(ConfigError, match=r"decode.layer=5: .* hidden_states 0..4"):
        extract_decode(settings(layer=5), tiny_model, tokenizer, PROMPTS, answers, out_dir=tmp_path)
