"""Feature store: resume equals uninterrupted, shards union equals one run, cache keys, bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import lengthpred.features.extract as fx
from lengthpred.errors import ConfigError, DataError, LengthpredError
from lengthpred.features import FeatureSettings, extract_features, load_features
from lengthpred.features.settings import cache_key, prompts_hash
from lengthpred.stages.features import ensure_features, feature_dir
from tests.conftest import compose_cfg
from tests.test_features import sdpa_model  # noqa: F401  (tiny model with peaky logits: z(H) well-posed)
from tests.tolerances import assert_close_f32

PROMPTS = [
    {"id": f"q{i:02d}", "messages": [{"role": "user", "content": "word " * (3 + 5 * i) + f"#{i}"}]}
    for i in range(6)
]


pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.numeric]


def small(**kw) -> FeatureSettings:
    base = dict(layers=(0, 2, 4), pools=("last", "entropy", "attn"), fused=("mix0.5",), attn_layers=(-1,),
                dtype="float32", batch_size=2)
    base.update(kw)
    return FeatureSettings(**base)


def columns(fs) -> dict[str, np.ndarray]:
    return {n: fs.get(n) for n in fs.names}


def test_kill_and_resume_equals_uninterrupted(tiny_model, tokenizer, tmp_path, monkeypatch):
    full = columns(load_features(extract_features(small(), tiny_model, tokenizer, PROMPTS,
                                                  out_dir=tmp_path / "a", progress=False)))
    real_write, calls = fx.write_part, []

    def dying_write(*args, **kw):
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed after two parts
        calls.append(1)
        return real_write(*args, **kw)

    monkeypatch.setattr(fx, "write_part", dying_write)
    with pytest.raises(KeyboardInterrupt):
        extract_features(small(), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path / "b", progress=False)
    with pytest.raises(DataError, match="incomplete"):
        load_features(tmp_path / "b")
    monkeypatch.setattr(fx, "write_part", real_write)
    resumed = load_features(extract_features(small(), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path / "b",
                                             progress=False))
    assert resumed.ids == sorted(p["id"] for p in PROMPTS)
    for name, want in full.items():
        np.testing.assert_array_equal(resumed.get(name), want, err_msg=name)


def test_shards_union_equals_one_run(sdpa_model, tokenizer, tmp_path):  # noqa: F811
    one = load_features(extract_features(small(), sdpa_model, tokenizer, PROMPTS, out_dir=tmp_path / "one",
                                         progress=False))
    for i in range(3):
        extract_features(small(), sdpa_model, tokenizer, PROMPTS, out_dir=tmp_path / "three", shard=(i, 3),
                         progress=False)
        if i < 2:
            with pytest.raises(DataError, match="missing shards"):
                load_features(tmp_path / "three")
    three = load_features(tmp_path / "three")
    assert three.ids == one.ids
    for name in one.names:
        # other batch compositions: two float32 results of the same prefill
        assert_close_f32(three.get(name), one.get(name), sdpa_model.config.vocab_size, both_float32=True, err_msg=name)
    sub = three.subset(["q03", "q00"])
    np.testing.assert_array_equal(sub.get("hs.L4.last"), three.get("hs.L4.last")[[3, 0]])
    with pytest.raises(DataError, match="no stored features"):
        three.subset(["nope"])


def test_manifest_and_cache_key(tiny_model, tokenizer, tmp_path):
    root = extract_features(small(), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path, model_name="tiny",
                            progress=False)
    m = json.loads((root / "manifest.json").read_text())
    assert m["layers"] == [0, 2, 4] and m["attn_layers"] == [3] and m["dtype"] == "float32"
    assert m["poolings"] == ["last", "entropy", "attn", "fused_mix0.5"] and m["ids"] == sorted(p["id"] for p in PROMPTS)
    assert m["git_revision"] and m["model"] == {"name": "tiny", "dtype": "float32"}
    recs = [(p["id"], p["messages"]) for p in PROMPTS]
    ident = {"name": "tiny", "dtype": "float32"}
    k = cache_key(small(), ident, prompts_hash(recs))
    assert m["cache_key"] == k
    assert cache_key(small(batch_size=5, padding_side="right"), ident, prompts_hash(recs)) == k  # not stored
    assert cache_key(small(layers=(0, 2)), ident, prompts_hash(recs)) != k
    assert cache_key(small(), ident, prompts_hash(recs[:-1])) != k
    changed = [(recs[0][0], [{"role": "user", "content": "other"}]), *recs[1:]]
    assert cache_key(small(), ident, prompts_hash(changed)) != k


def test_ensure_features_extracts_once_then_finds_by_key(tiny_model, tokenizer, tmp_path, monkeypatch):
    cfg = compose_cfg(["model=tiny", f"paths.data_dir={tmp_path}", "features.layers=[1,4]",
                       "features.attn_layers=[0]", "features.batch_size=4"], tmp_path)
    fs = ensure_features(cfg, PROMPTS, model=tiny_model, tokenizer=tokenizer)
    assert fs.root == feature_dir(cfg, PROMPTS) and fs.root.parent == tmp_path / "features" / "tiny"
    assert "hs.L4.fused_prod" in fs.names and fs.get("n_prompt_tokens").shape == (6, 1)
    monkeypatch.setattr(fx, "extract_features", lambda *a, **k: pytest.fail("should be found by key"))
    again = ensure_features(cfg, PROMPTS, model=tiny_model, tokenizer=tokenizer)
    np.testing.assert_array_equal(again.get("hs.L1.mean"), fs.get("hs.L1.mean"))


def test_ensure_features_extracts_only_what_a_head_needs_unless_the_full_store_exists(tiny_model, tokenizer,
                                                                                     tmp_path, monkeypatch):
    """`train.py head=linear` on a new trace: one layer, one pool, no entropy or attention."""
    cfg = compose_cfg(["model=tiny", f"paths.data_dir={tmp_path}", "features.attn_layers=[0]"], tmp_path)
    monkeypatch.setattr(fx, "token_entropy", lambda *a, **k: pytest.fail("linear on last needs no entropy"))
    fs = ensure_features(cfg, PROMPTS, model=tiny_model, tokenizer=tokenizer, need=[(2, "last")])
    assert fs.names == ["hs.L2.last", "n_prompt_tokens"] and fs.root != feature_dir(cfg, PROMPTS)
    monkeypatch.undo()
    both = ensure_features(cfg, PROMPTS, model=tiny_model, tokenizer=tokenizer,
                           need=[(2, "fused_mix0.5"), (3, "learned"), (None, None)])
    pools = ("last", "entropy", "attn", "fused_mix0.5")  # a store holds every (layer, pool) of its settings
    assert set(both.names) == {f"hs.L{i}.{p}" for i in (2, 3, 4) for p in pools} | {"n_prompt_tokens",
                                                                                    "entropy.mean"}
    assert len(both.token_inputs(3)) == len(PROMPTS)
    full = ensure_features(cfg, PROMPTS, model=tiny_model, tokenizer=tokenizer)  # the features stage
    monkeypatch.setattr(fx, "extract_features", lambda *a, **k: pytest.fail("the full store serves every head"))
    assert ensure_features(cfg, PROMPTS, model=tiny_model, tokenizer=tokenizer, need=[(1, "mean")]).root == full.root


@pytest.mark.parametrize("kw, match", [
    (dict(layers=(5,)), "layers: index 5 out of range"),
    (dict(layers=(-6,)), "out of range"),
    (dict(attn_layers=(4,)), "attn_layers: index 4 out of range"),
    (dict(token_layers=(1,)), "token_layers"),
])
def test_bad_layers_fail_before_any_work(tiny_model, tokenizer, tmp_path, kw, match):
    with pytest.raises(ConfigError, match=match):
        extract_features(small(**kw), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("kw, match", [
    (dict(pools=("max",)), "unknown"), (dict(fused=("mix2",)), "alpha"), (dict(fused=("sum",)), "mix"),
    (dict(dtype="int8"), "dtype"), (dict(layers="some"), "all"), (dict(padding_side="middle"), "padding"),
])
def test_bad_settings_are_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        small(**kw)


def test_unknown_config_key_is_named():
    with pytest.raises(ConfigError, match="poolz"):
        FeatureSettings.from_cfg({"name": "x", "poolz": ["last"]})


def test_empty_and_overlong_prompts_are_skipped_and_listed(tiny_model, tokenizer, tmp_path):
    prompts = [*PROMPTS, {"id": "empty", "messages": [{"role": "user", "content": "  "}]},
               {"id": "long", "messages": [{"role": "user", "content": "word " * 400}]}]
    fs = load_features(extract_features(small(max_prompt_tokens=100, overflow="reject"), tiny_model, tokenizer,
                                        prompts, out_dir=tmp_path, progress=False))
    assert set(fs.skipped) == {"empty", "long"} and "max_prompt_tokens" in fs.skipped["long"]
    assert fs.ids == sorted(p["id"] for p in PROMPTS)
    trunc = load_features(extract_features(small(max_prompt_tokens=100), tiny_model, tokenizer, prompts,
                                           out_dir=tmp_path / "t", progress=False))
    assert "long" in trunc.ids and trunc.subset(["long"]).get("n_prompt_tokens")[0, 0] == 100


@pytest.mark.parametrize("dtype, scale, match", [("float32", float("nan"), "non-finite"),
                                                 ("float16", 1e9, "float16 overflow")])
def test_non_finite_feature_names_the_prompt(tiny_model, tokenizer, tmp_path, dtype, scale, match):
    target = "q03"
    n_tok = len(fx.encode_prompt(tokenizer, PROMPTS[3]["messages"]))

    def poison(_m, _a, out):  # batches of one: the batch of q03 is recognised by its length
        h = out[0] if isinstance(out, tuple) else out
        return h * scale if h.shape[1] == n_tok else h

    handle = tiny_model.model.layers[1].register_forward_hook(poison)
    try:
        with pytest.raises(DataError, match=match) as e:
            extract_features(small(dtype=dtype, batch_size=1), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path,
                             progress=False)
    finally:
        handle.remove()
    assert target in str(e.value)
    assert isinstance(e.value, LengthpredError)


def test_attention_the_model_cannot_give_is_a_clear_error(tiny_model, tokenizer, tmp_path, monkeypatch):
    import lengthpred.features.capture as cap

    monkeypatch.setattr(cap.PrefillCapture, "_wrap_attention", lambda self, fn: fn)  # attention never observed
    with pytest.raises(ConfigError, match="attention importance saw 0 of 1"):
        extract_features(small(), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path, progress=False)
    assert not list((tmp_path / "parts").glob("*.safetensors")) if (tmp_path / "parts").exists() else True
    assert torch.is_grad_enabled()
