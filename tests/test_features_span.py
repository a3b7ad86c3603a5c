"""The pools leave the chat template out (`features.span=content`), attention importance is corrected for
causal position, fused_mix1.0 is the z-softmax on entropy alone, and stores from before these options load."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from lengthpred.errors import ConfigError, DataError
from lengthpred.features import FeatureSettings, extract_features, load_features
from lengthpred.features.capture import received_attention
from lengthpred.features.diagnostics import pool_weight_stats, summarise
from lengthpred.features.pooling import attention_importance, pool_weights, query_weights
from lengthpred.features.settings import LEGACY_POOLING
from lengthpred.features.span import encode_with_span
from lengthpred.prompting import encode_prompt
from tests.test_features import PROMPTS, _peaky
from tests.tolerances import assert_close_f32

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.numeric]
MULTI = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "  What is a prime? "},
         {"role": "assistant", "content": "A number with two divisors."}, {"role": "user", "content": "user"}]
ALL_POOLS = dict(pools=("last", "mean", "entropy", "attn"), fused=("mix0.5", "mix1.0", "prod"),
                 attn_layers="all", dtype="float32", batch_size=4)


@pytest.fixture(scope="module")
def peaky_model():
    from lengthpred.models.tiny import build_tiny_llama

    return _peaky(build_tiny_llama(seed=0))


def test_content_tokens_are_the_messages_and_nothing_of_the_template(tokenizer):
    ids, inside = encode_with_span(tokenizer, MULTI)
    assert ids == encode_prompt(tokenizer, MULTI)
    content = tokenizer.decode([i for i, c in zip(ids, inside, strict=True) if c])
    template = tokenizer.decode([i for i, c in zip(ids, inside, strict=True) if not c])
    # the leading-space token of the first user turn is "\n  " (template newline + content spaces): kept
    assert content.strip() == "What is a prime? A number with two divisors.user"
    assert "Answer briefly" in template and "helpful" not in template  # a given system message replaces the default
    assert template.count("<|im_start|>") == 5 and template.endswith("<|im_start|>assistant\n")
    # the default system block (SmolLM2's 22 tokens) is template too
    ids, inside = encode_with_span(tokenizer, [{"role": "user", "content": "Hi"}])
    assert tokenizer.decode([i for i, c in zip(ids, inside, strict=True) if c]) == "Hi" and not inside[0]


def test_content_mask_is_truncated_like_the_ids(tokenizer):
    msg = [{"role": "user", "content": "Write a long essay about the sea. " * 20}]
    ids, inside = encode_with_span(tokenizer, msg, max_prompt_tokens=50, overflow="truncate")
    assert ids == encode_prompt(tokenizer, msg, max_prompt_tokens=50, overflow="truncate") and len(inside) == 50
    assert not inside[0] and not inside[-1]
    cut = 50 - 25  # encode_prompt keeps the first 25 and the last 25 ids
    head = tokenizer.decode([i for i, c in zip(ids[:cut], inside[:cut], strict=True) if c])
    tail = tokenizer.decode([i for i, c in zip(ids[cut:], inside[cut:], strict=True) if c])
    assert head and tail and head in msg[0]["content"] and tail.strip() in msg[0]["content"]
    assert "<|im" not in head + tail


def test_a_template_that_rewrites_the_content_is_refused_not_guessed():
    class Upper:  # a template that upper-cases what it is given
        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            return "".join(f"<{m['role']}>{m['content'].upper()}</s>" for m in messages) + "<assistant>"

    from lengthpred.features.span import content_char_spans

    with pytest.raises(DataError, match="prompt q1: cannot locate .* features.span=all"):
        content_char_spans(Upper(), [{"role": "user", "content": "hello"}], "q1")


@pytest.mark.parametrize("side", ["left", "right"])
def test_no_pool_puts_weight_on_template_tokens(peaky_model, tokenizer, side):
    """The artefact: under span=all most pools put much of their weight on the template block every
    prompt shares; under span=content none puts any."""
    prompts = [{"id": "m", "messages": MULTI}, *PROMPTS]
    variants = {"before": FeatureSettings(**ALL_POOLS, padding_side=side, **LEGACY_POOLING),
                "after": FeatureSettings(**ALL_POOLS, padding_side=side),
                "rank": FeatureSettings(**ALL_POOLS, padding_side=side, fuse_on="rank", attn_norm="per_query")}
    stats = pool_weight_stats(variants, peaky_model, tokenizer, prompts)
    assert set(stats["pool"]) == {"mean", "entropy", "attn", "fused_mix0.5", "fused_mix1.0", "fused_prod"}
    assert len(stats) == 3 * 6 * len(prompts)
    assert (stats.loc[stats["variant"] != "before", "template_share"] == 0).all()
    assert (summarise(stats)["before"] > 0.5).all()
    # the shared forward (one attention sum per normalisation) gives what a forward per variant gives
    for name in ("before", "after"):
        alone = pool_weight_stats(variants[name], peaky_model, tokenizer, prompts)
        shared = stats.loc[stats["variant"] == name, "top1"].to_numpy()  # two float32 paths through entropy
        assert_close_f32(alone["top1"].to_numpy(), shared, peaky_model.config.vocab_size, both_float32=True,
                         err_msg=name)


def test_position_corrected_importance_of_uniform_causal_attention_is_flat():
    """q = 0: every query attends uniformly to the keys it sees. The raw sum favours early tokens by
    position alone; `lift` is 1 per head everywhere, under either padding."""
    t, heads = 9, 4
    for mask in (torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1]]), torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0, 0]])):
        q, k = torch.zeros(1, heads, t, 8), torch.randn(1, 2, t, 8)
        real = mask.bool()[0]
        raw = received_attention(q, k, mask, 1.0, chunk=4)
        assert raw[0, real][0] > 2 * raw[0, real][-1]  # the sum's position bias
        lift = attention_importance(received_attention(q, k, mask, 1.0, 4, query_weight=query_weights(mask, "lift")),
                                    mask, "lift")
        assert_close_f32(lift[0, real].numpy(), np.full(int(real.sum()), float(heads)), t * heads)
        assert (lift[0, ~real] == 0).all()
    # per_query: an all-equal causal attention matrix (not row-normalised) is flat too
    a = torch.tril(torch.ones(t, t))  # [query, key]
    per_query = attention_importance(a.sum(0)[None], torch.ones(1, t), "per_query")
    np.testing.assert_allclose(per_query[0].numpy(), 1.0)


def test_drop_sink_and_an_empty_span_row():
    mask = torch.ones(2, 5)
    span = torch.tensor([[0, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    ent, imp = torch.rand(2, 5), torch.rand(2, 5) + 0.1
    w = pool_weights(mask, ("mean", "attn", "last"), ("mix0.5",), ent, imp, span=span)
    assert (w["mean"][0, 0] == 0) and (w["attn"][0, 0] == 0) and (w["fused_mix0.5"][0, 0] == 0)
    np.testing.assert_allclose(w["mean"][1].numpy(), 0.2)  # no span token: every real token
    assert w["last"][0, -1] == 1


def test_mix1_is_the_z_softmax_on_entropy_and_rank_fusion_is_bounded():
    mask = torch.ones(1, 30)
    ent = torch.randn(1, 30) * 3
    imp = torch.rand(1, 30)
    imp[0, 4] = 1e4  # one extreme token
    for fuse_on in ("z", "log", "rank"):
        w = pool_weights(mask, ("entropy",), ("mix1.0", "mix0.5"), ent, imp, fuse_on=fuse_on)
        if fuse_on != "rank":
            z = (ent - ent.mean()) / ent.std(unbiased=False)
            np.testing.assert_allclose(w["fused_mix1.0"].numpy(), torch.softmax(z, -1).numpy(), rtol=1e-4)
            assert not torch.allclose(w["fused_mix1.0"], w["entropy"])  # another temperature
    w_rank = pool_weights(mask, (), ("mix0.0",), ent, imp, fuse_on="rank")["fused_mix0.0"]
    assert w_rank.max() / w_rank.min() <= np.exp(2 * np.sqrt(3)) + 1e-3
    w_z = pool_weights(mask, (), ("mix0.0",), ent, imp, fuse_on="z")["fused_mix0.0"]
    assert w_z.max() > 0.9 > 0.2 > w_rank.max()  # z-softmax hands the outlier nearly everything


def test_stores_from_before_the_span_option_keep_their_key_and_load(tiny_model, tokenizer, tmp_path):
    legacy = FeatureSettings(**ALL_POOLS, token_layers=(2,), **LEGACY_POOLING)
    old_hash_keys = {"layers", "pools", "fused", "attn_layers", "token_layers", "dtype", "entropy_dtype",
                     "max_prompt_tokens", "overflow"}
    assert set(legacy.hashed()) == old_hash_keys  # same cache key as before the options existed
    assert set(FeatureSettings(**ALL_POOLS).hashed()) == old_hash_keys | {"span", "attn_norm", "fuse_on"}
    assert "span" not in FeatureSettings(pools=("last",), fused=()).hashed()  # `last` ignores the span
    root = extract_features(legacy, tiny_model, tokenizer, PROMPTS, out_dir=tmp_path, progress=False)
    # what an old store looks like: no pooling in the manifest, no span in the token files, no part checksums
    for f in (root / "parts").glob("*.sha256"):
        f.unlink()
    mf = json.loads((root / "manifest.json").read_text())
    del mf["pooling"]
    (root / "manifest.json").write_text(json.dumps(mf))
    for f in (root / "parts").glob("*.tokens.safetensors"):
        t = load_file(str(f))
        del t["span"]
        save_file(t, str(f), metadata={"ids": json.dumps(json.loads(_meta(f)))})
    fs = load_features(root)
    assert fs.pooling == LEGACY_POOLING
    rows = fs.token_inputs(2)
    assert [len(r) for r in rows] == [len(encode_prompt(tokenizer, p["messages"])) for p in PROMPTS]


def _meta(path) -> str:
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        return f.metadata()["ids"]


@pytest.mark.parametrize("kw, match", [
    (dict(span="user"), "features.span='user': use one of"),
    (dict(attn_norm="mean"), "features.attn_norm"),
    (dict(fuse_on="softmax"), "features.fuse_on"),
    (dict(drop_sink="yes"), "features.drop_sink"),
])
def test_bad_pooling_options_are_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        FeatureSettings(**kw)


def test_default_config_pools_content_with_mix1(tmp_path):
    from tests.conftest import compose_cfg

    s = FeatureSettings.from_cfg(compose_cfg(["model=tiny"], tmp_path).features)
    assert (s.span, s.attn_norm, s.fuse_on) == ("content", "lift", "log") and "mix1.0" in s.fused
    assert dataclasses.replace(s, span="all").hashed() != s.hashed()
