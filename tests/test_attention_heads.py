"""Attention importance per head: the stored per-head pools equal a slow reference from the model's own
attention weights and rebuild the `attn` pool exactly; the heads are chosen on validation only (a planted
informative head is found, test never read); the stage writes the forms and their paired differences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lengthpred.errors import ConfigError, DataError
from lengthpred.features import FeatureSettings, extract_features, load_features
from lengthpred.features.settings import HEAD_POOL, HEAD_SHARE
from lengthpred.features.span import encode_with_span
from lengthpred.heads.attention_heads import HeadStates, choose_heads, ridge_val_scores
from lengthpred.metrics import spearman_or_nan
from tests.test_features import ATTN_LAYERS, PROMPTS, _peaky
from tests.test_heads_training import trace_run  # noqa: F401  (the fixture)
from tests.tolerances import assert_close_f32


@pytest.fixture(scope="module")
def models():
    from lengthpred.models.tiny import build_tiny_llama

    return (_peaky(build_tiny_llama(seed=0, attn_implementation="sdpa")),
            _peaky(build_tiny_llama(seed=0, attn_implementation="eager")))


def reference_heads(model_eager, tokenizer, prompt: dict, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """Per head of ATTN_LAYERS (in order): layer `layer`'s state pooled by that head's `lift` importance over
    the content span, and its share of the summed mass; float64 from output_attentions."""
    ids, span = encode_with_span(tokenizer, prompt["messages"])
    span, t = np.array(span), len(ids)
    with torch.no_grad():
        out = model_eager(torch.tensor([ids]), output_hidden_states=True, output_attentions=True)
    h = out.hidden_states[layer][0].double().numpy()[span]
    pooled, mass = [], []
    for i in ATTN_LAYERS:
        for a in out.attentions[i][0].double().numpy():  # [query, key] of one head
            att = (a * np.arange(1, t + 1)[:, None]).sum(0) / (t - np.arange(t))
            w = att[span]
            pooled.append(w @ h / w.sum())
            mass.append(w.sum())
    mass = np.array(mass)
    return np.array(pooled), mass / mass.sum()


@pytest.mark.numeric
@pytest.mark.usefixtures("one_torch_thread")
def test_per_head_pools_equal_a_slow_reference_and_rebuild_the_attn_pool(models, tokenizer, tmp_path):
    sdpa, eager = models
    s = FeatureSettings(layers=(2, 4), pools=("last", "attn", HEAD_POOL), fused=(), attn_layers=ATTN_LAYERS,
                        dtype="float32", batch_size=4, max_batch_tokens=4096)
    fs = load_features(extract_features(s, sdpa, tokenizer, PROMPTS, out_dir=tmp_path, model_name="tiny",
                                        progress=False))
    n_heads = sdpa.config.num_attention_heads
    k = len(ATTN_LAYERS) * n_heads
    assert fs.manifest["n_attention_heads"] == n_heads and fs.manifest["columns"][HEAD_SHARE] == k
    by_id = {p["id"]: p for p in PROMPTS}
    n_terms = sdpa.config.vocab_size  # the longest reduction upstream, as in test_features
    for layer in (2, 4):
        st = HeadStates.from_columns(fs.get(f"hs.L{layer}.{HEAD_POOL}"), fs.get(HEAD_SHARE), fs.manifest["attn_layers"],
                                     n_heads)
        assert st.states.shape == (len(PROMPTS), k, sdpa.config.hidden_size)
        for r, pid in enumerate(fs.ids):
            want, share = reference_heads(eager, tokenizer, by_id[pid], layer)
            assert_close_f32(st.states[r], want, n_terms, err_msg=f"{pid} L{layer} per-head pools")
            assert_close_f32(st.share[r], share, n_terms, err_msg=f"{pid} shares")
        # every head together is the stored attn pool: both are float32 results of the same importance
        assert_close_f32(st.pooled(range(k)), fs.get(f"hs.L{layer}.attn"), n_terms, both_float32=True,
                         err_msg=f"L{layer} attn rebuilt")
    assert st.label(n_heads) == (ATTN_LAYERS[1], 0) and st.heads_of_layers([ATTN_LAYERS[1]]) == list(range(n_heads, k))


def test_a_store_without_attn_heads_keeps_its_cache_key_and_columns():
    old = FeatureSettings(pools=("last", "attn"), fused=())
    new = FeatureSettings(pools=("last", "attn", HEAD_POOL), fused=())
    assert "attn_heads" not in json.dumps(old.hashed()) and new.hashed()["pools"][-1] == HEAD_POOL
    assert new.per_head and not old.per_head and new.needs_attention
    assert FeatureSettings(pools=("last",), fused=()).only([(3, HEAD_POOL)]).pools == (HEAD_POOL,)
    with pytest.raises(ConfigError, match="unknown"):
        FeatureSettings(pools=("last", "attn_head"))


def planted(n: int = 240, n_layers: int = 3, n_heads: int = 4, d: int = 5, signal: int = 6, seed: int = 0):
    """Per-head pools where only head `signal` carries log length; the others are noise."""
    rng = np.random.default_rng(seed)
    k = n_layers * n_heads
    states = rng.normal(size=(n, k, d))
    y = np.exp(4 + 0.9 * states[:, signal, 0] + 0.2 * rng.normal(size=n)).round() + 1
    share = rng.uniform(0.5, 1.5, size=(n, k))
    st = HeadStates(states.astype(np.float32), (share / share.sum(1, keepdims=True)).astype(np.float32),
                    tuple(range(10, 10 + n_layers)), n_heads)
    return st, y


def _rows(st: HeadStates, rows: slice) -> HeadStates:
    return HeadStates(st.states[rows], st.share[rows], st.layers, st.n_heads)


def test_choose_heads_finds_a_planted_head_on_validation_without_reading_test():
    st, y = planted()
    train, val = _rows(st, slice(0, 120)), _rows(st, slice(120, 180))
    c = choose_heads(train, y[:120], val, y[120:180], [1.0, 100.0], [1, 2, 4])
    assert c.order[0] == 6 and c.heads == [6] and c.k == 1
    assert set(c.k_val) == {1, 2, 4, 12}  # every head (= the attn pool) is always a candidate
    assert c.k_val[1] > c.k_val[12] + 0.2
    assert st.label(6) == (11, 2)
    # the choice reads train and val only: scrambling the test rows cannot move it
    st2 = HeadStates(np.concatenate([st.states[:180], st.states[180:][::-1] * 0]), st.share, st.layers, st.n_heads)
    c2 = choose_heads(_rows(st2, slice(0, 120)), y[:120], _rows(st2, slice(120, 180)), y[120:180], [1.0, 100.0],
                      [1, 2, 4])
    assert c2.heads == c.heads and np.allclose(c2.head_val, c.head_val)


def test_ridge_val_scores_match_the_linear_readout():
    from lengthpred.heads.linear import LinearHead

    st, y = planted()
    x = st.states[:, 6]
    got = ridge_val_scores(x[:120], y[:120], x[120:], y[120:], [0.1, 10.0, 1e4])
    for a, g in zip([0.1, 10.0, 1e4], got, strict=True):
        head = LinearHead(alpha=a, back_transform="median").fit(x[:120], y[:120])
        assert g == pytest.approx(spearman_or_nan(y[120:], head.predict(x[120:])), abs=1e-9)


def test_head_sets_pool_by_share_and_bad_inputs_are_named():
    st, _ = planted(n=4)
    two = st.pooled([1, 3])
    w = st.share[:, [1, 3]].astype(np.float64)
    want = (w[..., None] * st.states[:, [1, 3]]).sum(1) / w.sum(1, keepdims=True)
    np.testing.assert_allclose(two, want, rtol=1e-6)
    with pytest.raises(ConfigError, match="at least one head"):
        st.pooled([])
    with pytest.raises(ConfigError, match=r"\[3\]"):
        st.heads_of_layers([3])
    with pytest.raises(DataError, match="do not match"):
        HeadStates(st.states, st.share[:, :5], st.layers, st.n_heads)
    with pytest.raises(DataError, match="not 12 heads"):
        HeadStates.from_columns(np.zeros((4, 13)), np.zeros((4, 12)), st.layers, st.n_heads)
    y = np.arange(4.0) + 1
    with pytest.raises(DataError, match="train and val"):
        choose_heads(st, y, HeadStates(st.states[:1], st.share[:1], st.layers, st.n_heads), y[:1], [1.0], [1])
    with pytest.raises(ConfigError, match=">= 1"):
        choose_heads(st, y, st, y, [1.0], [0, 2])


def test_the_stage_writes_the_forms_and_pairs_them_with_attn(trace_run):  # noqa: F811
    from lengthpred.stages.attention_sweep import CHOSEN, LATE, sweep_attention

    cfg = trace_run("linear", "features.pools=[last,attn]", "features.fused=[]", "features.attn_layers=[0,1,2,3]",
                    "sweep=attention_heads", "sweep.heads=[linear]", "sweep.layers=[2]", "sweep.late_layers=[2,3]",
                    "sweep.head_counts=[1,2]", "sweep.n_boot=20")
    rows, diffs, choice = sweep_attention(cfg, cfg.paths.output_dir)
    out = Path(cfg.paths.output_dir)
    for f in ("attention.md", "attention_heads.csv", "attention_heads.png", "attention_choice.json", "poolings.csv",
              "pooling_diffs.csv"):
        assert (out / f).is_file(), f
    assert list(rows["pooling"]) == ["last", "attn", LATE, CHOSEN]
    saved = json.loads((out / "attention_choice.json").read_text())
    assert saved["k"] == choice.k and len(saved["heads"]) == choice.k and saved["attn_rebuilt_max_rel_diff"] < 5e-3
    pairs = diffs[diffs["kind"] == "pair"]
    assert list(pairs["pooling"]) == [f"{LATE} − attn", f"{CHOSEN} − attn"]
    md = (out / "attention.md").read_text()
    assert "k chosen on validation" in md and "Pooling × head at layer 2" in md
    bad = trace_run("linear", "features.pools=[last,attn]", "features.fused=[]", "sweep=attention_heads",
                    "sweep.heads=[linear]", "sweep.layers=[2]", "sweep.poolings=[last]")
    with pytest.raises(ConfigError, match="include it"):
        sweep_attention(bad, bad.paths.output_dir)
