"""Stored pooled features equal a slow reference from output_hidden_states/output_attentions (eager), for
every span, attention normalisation and fusion score."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthpred.features import FeatureSettings, extract_features, load_features
from lengthpred.features.settings import _FUSED, LEGACY_POOLING
from lengthpred.features.span import encode_with_span
from lengthpred.prompting import encode_prompt
from tests.tolerances import assert_close_f32

PROMPTS = [
    {"id": f"p{i:02d}", "messages": [{"role": "user", "content": text}]}
    for i, text in enumerate([
        "Hi",
        "Write a haiku about autumn leaves falling on a quiet pond.",
        "What is 17 * 23? Show your working step by step please.",
        "Summarise the plot of Hamlet in two sentences.",
        "List three prime numbers.",
        "Explain recursion to a five year old child using a story about nesting dolls and mirrors.",
    ])
]
ATTN_LAYERS = (1, 3)


pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.numeric]


def settings(**kw) -> FeatureSettings:
    base = dict(layers="all", pools=("last", "mean", "entropy", "attn"), fused=("mix0.3", "prod"),
                attn_layers=ATTN_LAYERS, dtype="float32", batch_size=4, max_batch_tokens=4096)
    base.update(kw)
    return FeatureSettings(**base)


def _z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-6)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _rank_z(x: np.ndarray) -> np.ndarray:
    return _z(np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float))


# (span, drop_sink, attn_norm, fuse_on): the stores made before these options, the defaults, the others
VARIANTS = {"legacy": tuple(LEGACY_POOLING.values()), "default": ("content", False, "lift", "log"),
            "other": ("all", True, "per_query", "rank")}


def variant(name: str) -> dict:
    return dict(zip(LEGACY_POOLING, VARIANTS[name], strict=True))


def reference(model_eager, tokenizer, prompt: dict, s: FeatureSettings) -> dict[str, np.ndarray]:
    """Features of one prompt, unbatched, from the model's own outputs (float64 maths)."""
    if s.span == "content":
        ids, span = encode_with_span(tokenizer, prompt["messages"])
        span = np.array(span)
    else:
        ids = encode_prompt(tokenizer, prompt["messages"])
        span = np.arange(len(ids)) >= (1 if s.drop_sink else 0)
    t = len(ids)
    with torch.no_grad():
        out = model_eager(torch.tensor([ids]), output_hidden_states=True, output_attentions=True)
    logits = out.logits[0].double()
    logp = torch.log_softmax(logits, -1)
    ent = (-(logp.exp() * logp).sum(-1)).numpy()  # [T]
    a = sum(out.attentions[i][0].double().sum(dim=0) for i in ATTN_LAYERS).numpy()  # [query, key]
    if s.attn_norm == "lift":
        a = a * np.arange(1, t + 1)[:, None]  # query i sees i + 1 keys: uniform attention gives 1 / (i + 1)
    att = a.sum(0) if s.attn_norm == "sum" else a.sum(0) / (t - np.arange(t))  # t - j queries see key j
    att = att[span] / att[span].sum()
    hs, es = ent[span], att
    if s.fuse_on == "rank":
        zh, za = _rank_z(hs), _rank_z(es)
    else:
        zh, za = _z(hs), _z(np.log(es) if s.fuse_on == "log" else es)
    w = {"mean": np.full(span.sum(), 1 / span.sum()), "entropy": _softmax(hs), "attn": att}
    for f in s.fused:
        alpha = _FUSED.match(f).group("alpha")
        if alpha is not None:
            w[f"fused_{f}"] = _softmax(float(alpha) * zh + (1 - float(alpha)) * za)
        else:
            p = _softmax(hs) * att
            w[f"fused_{f}"] = p / p.sum()
    ref = {"n_prompt_tokens": np.array([t]), "entropy.mean": np.array([hs.mean()])}
    for layer, h in enumerate(out.hidden_states):
        h = h[0].double().numpy()
        ref[f"hs.L{layer}.last"] = h[-1]
        for name, wt in w.items():
            ref[f"hs.L{layer}.{name}"] = wt @ h[span]
    return ref


def _peaky(model):
    # random weights give near-uniform next-token distributions (entropy ≈ log V everywhere), which
    # would make z(H) amplify float noise: sharpen the logits so entropy varies across tokens
    with torch.no_grad():
        model.model.norm.weight.mul_(40.0)
    return model


@pytest.fixture(scope="module")
def eager_model():
    from lengthpred.models.tiny import build_tiny_llama

    return _peaky(build_tiny_llama(seed=0, attn_implementation="eager"))


@pytest.fixture(scope="module")
def sdpa_model():
    from lengthpred.models.tiny import build_tiny_llama

    return _peaky(build_tiny_llama(seed=0, attn_implementation="sdpa"))


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("pooling", list(VARIANTS))
def test_pooled_features_equal_slow_reference(sdpa_model, eager_model, tokenizer, tmp_path, side, pooling):
    s = settings(padding_side=side, **variant(pooling))
    root = extract_features(s, sdpa_model, tokenizer, PROMPTS, out_dir=tmp_path / side, model_name="tiny",
                            progress=False)
    fs = load_features(root)
    assert fs.ids == sorted(p["id"] for p in PROMPTS)
    assert len(fs.names) == 5 * 6 + 2  # 5 hidden_states indices × 6 pools + 2 scalars
    assert fs.pooling == s.pooling
    by_id = {p["id"]: p for p in PROMPTS}
    assert np.ptp(fs.get("entropy.mean")) > 0.1  # the entropy weights are not trivially uniform
    got = {name: fs.get(name) for name in fs.names}
    for r, pid in enumerate(fs.ids):
        ref = reference(eager_model, tokenizer, by_id[pid], s)
        assert set(ref) == set(fs.names)
        for name, want in ref.items():  # float32 sdpa vs float64 eager; entropy reduces over the vocabulary
            assert_close_f32(got[name][r], want, sdpa_model.config.vocab_size, err_msg=f"{pid} {name}")


def test_left_and_right_padding_agree_and_hooks_removed(sdpa_model, tokenizer, tmp_path):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    a = load_features(extract_features(settings(padding_side="left"), sdpa_model, tokenizer, PROMPTS,
                                       out_dir=tmp_path / "l", progress=False))
    b = load_features(extract_features(settings(padding_side="right"), sdpa_model, tokenizer, PROMPTS,
                                       out_dir=tmp_path / "r", progress=False))
    for name in a.names:  # two float32 results, each within the bound of the exact value
        assert_close_f32(a.get(name), b.get(name), sdpa_model.config.vocab_size, both_float32=True, err_msg=name)
    assert dict(ALL_ATTENTION_FUNCTIONS._local_mapping) == before
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in sdpa_model.modules())


def test_float16_storage_and_token_states(tiny_model, tokenizer, tmp_path):
    s = settings(dtype="float16", layers=(0, 2, -1), token_layers=(2,), fused=())
    fs = load_features(extract_features(s, tiny_model, tokenizer, PROMPTS, out_dir=tmp_path, progress=False))
    assert fs.get("hs.L4.last").dtype == np.float32 and fs.get("hs.L4.last").shape == (6, 64)
    assert "hs.L1.last" not in fs.names and "hs.L0.mean" in fs.names
    ids, content = encode_with_span(tokenizer, PROMPTS[3]["messages"])
    tok = fs.token_states(2, "p03")
    assert tok.shape == (len(ids), 64) and 0 < sum(content) < len(ids)
    # mean of the stored content-token states is the stored mean pool (float16 rounding)
    np.testing.assert_allclose(tok[content].mean(0), fs.subset(["p03"]).get("hs.L2.mean")[0], atol=2e-3)
    np.testing.assert_array_equal(fs.subset(["p03"]).token_inputs(2)[0][:, :64], tok[content])


def test_no_attention_needed_skips_attention_capture(tiny_model, tokenizer, tmp_path, monkeypatch):
    s = settings(pools=("last", "entropy"), fused=(), attn_layers=(99,))  # unused, so not validated
    fs = load_features(extract_features(s, tiny_model, tokenizer, PROMPTS, out_dir=tmp_path, progress=False))
    assert sorted({n.split(".")[-1] for n in fs.names if n.startswith("hs.")}) == ["entropy", "last"]
    # last/mean only: no LM head over the prompt at all (a plain prefill's cost)
    import lengthpred.features.extract as fx

    monkeypatch.setattr(fx, "token_entropy", lambda *a, **k: pytest.fail("entropy not needed"))
    s = settings(pools=("last", "mean"), fused=(), attn_layers=())
    fs = load_features(extract_features(s, tiny_model, tokenizer, PROMPTS, out_dir=tmp_path / "b", progress=False))
    assert "entropy.mean" not in fs.names and "n_prompt_tokens" in fs.names


@pytest.mark.integration
def test_real_model_last_and_first_layers_match_output_hidden_states(tmp_path):
    from lengthpred.models.serving import load_causal_lm
    from lengthpred.models.specs import embedded_serving_spec

    model, tok = load_causal_lm(embedded_serving_spec())
    s = settings(layers=(0, 15, -1), pools=("last", "mean"), fused=(), attn_layers=())
    fs = load_features(extract_features(s, model, tok, PROMPTS[:3], out_dir=tmp_path, progress=False))
    for r, p in enumerate(sorted(PROMPTS[:3], key=lambda p: p["id"])):
        with torch.no_grad():
            hs = model(torch.tensor([encode_prompt(tok, p["messages"])]), output_hidden_states=True).hidden_states
        assert len(hs) == 31
        for layer in (0, 15, 30):  # 30 = after the final norm
            want = hs[layer][0, -1].numpy()
            np.testing.assert_allclose(fs.get(f"hs.L{layer}.last")[r], want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


def test_token_inputs_carry_entropy_and_attention_that_rebuild_the_fused_pool(sdpa_model, tokenizer, tmp_path):
    """The token-level file holds per-token entropy and attention importance of the span's tokens: re-pooling
    the stored states with softmax(a z(H) + (1-a) z(log A)) from them gives the stored fused column (what a
    learned fusion needs)."""
    s = settings(layers=(2, -1), token_layers=(2,))
    fs = load_features(extract_features(s, sdpa_model, tokenizer, PROMPTS, out_dir=tmp_path, progress=False))
    rows = fs.token_inputs(2)
    assert len(rows) == len(fs.ids) and all(r.shape[1] == 64 + 2 for r in rows)
    stored = fs.get("hs.L2.fused_mix0.3")
    for r, x in enumerate(rows):
        h, ent, att = x[:, :64].astype(np.float64), x[:, 64], x[:, 65]
        want = _softmax(0.3 * _z(ent) + 0.7 * _z(np.log(att / att.mean()))) @ h  # fuse_on=log
        assert_close_f32(stored[r], want, sdpa_model.config.vocab_size, err_msg=fs.ids[r])
    assert len(fs.subset(fs.ids[:2]).token_inputs(2)) == 2


def test_token_inputs_without_token_layers_is_a_clear_error(tiny_model, tokenizer, tmp_path):
    from lengthpred.errors import DataError

    fs = load_features(extract_features(settings(layers=(2,)), tiny_model, tokenizer, PROMPTS[:2],
                                        out_dir=tmp_path, progress=False))
    with pytest.raises(DataError, match="token_layers"):
        fs.token_inputs(2)
