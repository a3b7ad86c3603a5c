"""The GPU path, checked on a CPU (no GPU is lent to this project's CI).

A recorded-device fake: the tiny model is moved to torch's `meta` device, so every tensor a code path builds on
the CPU and forgets to move is caught where it enters the model (a pre-hook records every tensor argument's device
and stops the forward). `LOCAL_RANK=1` with two (patched) visible GPUs picks `cuda:1`, from `resolve_device` up to
the extract stage's model load. A forward that raises CUDA's out-of-memory error once halves the token budget and
the store equals an uninterrupted run's. No assertion here depends on CPU kernels' numbers.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from lengthpred.errors import ConfigError
from lengthpred.features.extract import extract_features
from lengthpred.features.settings import FeatureSettings
from lengthpred.features.store import load_features
from lengthpred.models import device as dev
from tests.conftest import compose_cfg
from tests.test_features import sdpa_model  # noqa: F401  (the tiny model with SDPA and peaky distributions)
from tests.test_heads_proxy import tiny_encoder  # noqa: F401  (the tiny BERT proxy encoder fixture)
from tests.tolerances import assert_close_f32

PROMPTS = [{"id": f"q{i}", "messages": [{"role": "user", "content": "word " * (3 + 4 * i)}]} for i in range(5)]
META = torch.device("meta")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Reached(Exception):
    """Raised by the recording hook: the forward was reached (and every input checked)."""


def record_inputs(module: torch.nn.Module, seen: list[torch.device]):
    """A pre-hook on `module` recording the device of every tensor argument, then stopping the forward."""

    def hook(_m, args, kwargs):
        seen.extend(t.device for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor))
        raise Reached

    return module.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.fixture
def meta_model():
    from lengthpred.models.tiny import build_tiny_llama

    return build_tiny_llama(seed=0).to(META)


@pytest.fixture
def two_gpus(monkeypatch):
    """A CPU build that believes it sees two CUDA devices (only the device logic runs: nothing is allocated)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def small(**kw) -> FeatureSettings:
    base = dict(layers=(0, 2, 4), pools=("last", "entropy", "attn"), fused=("mix0.5",), attn_layers=(-1,),
                dtype="float32", batch_size=2, token_layers=(2,))
    return FeatureSettings(**{**base, **kw})


# -- names, ranks and dtypes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpu", "cuda:x", "tpu", "cuda0"])
def test_an_unknown_device_name_is_one_line(name):
    with pytest.raises(ConfigError, match="not a device name"):
        dev.resolve_device(name)


def test_cuda_without_cuda_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="device='cuda' but this machine has"):
        dev.resolve_device("cuda")
    assert dev.resolve_device("auto") == torch.device("cpu")


def test_local_rank_picks_its_own_gpu(two_gpus, monkeypatch):
    assert dev.resolve_device("cuda") == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert dev.resolve_device("cuda") == torch.device("cuda", 1)
    assert dev.resolve_device("auto") == torch.device("cuda", 1)
    assert dev.resolve_device("cpu") == torch.device("cpu")  # a CPU run ignores the rank
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ConfigError, match="LOCAL_RANK=2 but only 2 CUDA device"):
        dev.resolve_device("cuda")
    with pytest.raises(ConfigError, match="only 2 CUDA device"):
        dev.resolve_device("cuda:5")


def test_dtype_auto_follows_the_device(two_gpus):
    assert dev.resolve_dtype("auto", torch.device("cpu")) == "float32"
    assert dev.resolve_dtype("auto", torch.device("cuda", 0)) == "bfloat16"
    assert dev.resolve_dtype("float16", torch.device("cpu")) == "float16"


def test_device_map_spreads_only_what_does_not_fit(two_gpus, monkeypatch):
    gpu, gb = torch.device("cuda", 0), 10**9
    assert dev.choose_device_map(None, torch.device("cpu")) is None
    assert dev.choose_device_map(None, gpu, weights=16 * gb, free=70 * gb, n_gpus=2) == {"": "cuda:0"}
    assert dev.choose_device_map(None, gpu, weights=140 * gb, free=70 * gb, n_gpus=2) == "auto"
    assert dev.choose_device_map(None, gpu, weights=140 * gb, free=70 * gb, n_gpus=1) == {"": "cuda:0"}
    assert dev.choose_device_map("balanced", gpu) == "balanced"
    with pytest.raises(ConfigError, match="spreads a model over GPUs"):
        dev.choose_device_map("auto", torch.device("cpu"))
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ConfigError, match="under a launcher"):
        dev.choose_device_map("auto", gpu)


# -- every tensor reaches the model's device ------------------------------------------------------------------------
def test_static_generation_moves_its_input_ids(meta_model, tokenizer, monkeypatch):
    from lengthpred.generate.backends import StaticBackend
    from lengthpred.generate.settings import GenerationSettings

    backend = StaticBackend(meta_model, tokenizer, GenerationSettings(backend="static", num_samples=1,
                                                                      temperature=0, max_new_tokens=4))
    seen: list[torch.device] = []

    def generate(**kwargs):  # transformers' generate reads values before the forward: record at its door
        seen.extend(t.device for t in kwargs.values() if isinstance(t, torch.Tensor))
        raise Reached

    monkeypatch.setattr(meta_model, "generate", generate)
    with pytest.raises(Reached):
        backend.generate([[5, 6, 7], [8, 9]], ["a", "b"], seed=0)
    assert seen and set(seen) == {META}


def test_extraction_moves_every_input(meta_model, tokenizer, tmp_path):
    seen: list[torch.device] = []
    handle = record_inputs(meta_model.get_decoder(), seen)
    try:
        with pytest.raises(Reached):
            extract_features(small(), meta_model, tokenizer, PROMPTS, out_dir=tmp_path, progress=False)
    finally:
        handle.remove()
    assert seen and set(seen) == {META}


def test_cost_timing_moves_every_input(meta_model):
    from lengthpred.costs.timing import extraction_times

    seen: list[torch.device] = []
    handle = record_inputs(meta_model.get_decoder(), seen)
    try:
        with pytest.raises(Reached):
            extraction_times(meta_model, [[5, 6, 7, 8]], {"h": small()}, repeats=1, clock="wall", progress=False)
    finally:
        handle.remove()
    assert seen and set(seen) == {META}


def test_proxy_head_predicts_on_its_device(tiny_encoder):  # noqa: F811
    from lengthpred.heads.proxy import ProxyRegHead

    head = ProxyRegHead(encoder=str(tiny_encoder), epochs=1, max_seq_len=16, progress=False)
    head.fit(["a b c", "d e", "f g h i", "j"], [10, 20, 30, 40])
    head._to(META)
    seen: list[torch.device] = []
    handle = record_inputs(head.encoder_, seen)
    try:
        with pytest.raises(Reached):
            head.predict(["k l m"])
    finally:
        handle.remove()
    assert seen and set(seen) == {META}


def test_gpu_costs_refuse_a_host_clock_and_time_with_cuda_events(monkeypatch):
    from lengthpred.costs import timing

    gpu = torch.device("cuda", 0)
    with pytest.raises(ConfigError, match="costs.clock=cpu times the host"):
        timing.stopwatch("cpu", gpu)
    calls = []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing

        def record(self) -> None:
            calls.append("record")

        def synchronize(self) -> None:
            calls.append("sync")

        def elapsed_time(self, end) -> float:
            return 250.0  # ms

    monkeypatch.setattr(torch.cuda, "Event", Event)
    assert timing.stopwatch("auto", gpu)(lambda: calls.append("work")) == 0.25
    assert calls == ["record", "work", "record", "sync"]
    assert timing.clock_name("auto", torch.device("cpu")) == "cpu"


# -- the stage: LOCAL_RANK=1 loads on device 1 ----------------------------------------------------------------------
@pytest.fixture
def trace_cfg(tmp_path):
    from lengthpred.stages.data import prepare

    rows = [{"prompt": f"question {i} " + "word " * i, "length": 10 + i} for i in range(12)]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["model=tiny", "data=trace", f"data.train_path={tmp_path / 'trace.jsonl'}",
            f"paths.data_dir={tmp_path / 'data'}", "features.layers=[0,4]", "features.pools=[last]",
            "features.fused=[]", "++cross_domain=false"]
    prepare(compose_cfg(base, tmp_path))
    return base


def test_the_extract_stage_loads_on_local_rank_1(trace_cfg, two_gpus, monkeypatch, tmp_path):
    from lengthpred.models.tiny import build_tiny_llama
    from lengthpred.stages import features as stage
    from lengthpred.stages import model as stage_model

    loaded = []

    def fake_load(spec, device="cpu"):
        from lengthpred.models.checkpoint import load_tokenizer

        loaded.append((device, spec.dtype))
        return build_tiny_llama(seed=0).to(META), load_tokenizer(spec)

    monkeypatch.setattr(stage_model, "load_causal_lm", fake_load)
    monkeypatch.setenv("LOCAL_RANK", "1")
    cfg = compose_cfg([*trace_cfg, "device=cuda", "model.dtype=auto"], tmp_path / "run")
    seen: list[torch.device] = []
    original = stage.load_model

    def load_and_record(c):
        model, tok = original(c)
        record_inputs(model.get_decoder(), seen)
        return model, tok

    monkeypatch.setattr(stage, "load_model", load_and_record)
    with pytest.raises(Reached):
        stage.run_extract(cfg, tmp_path / "run")
    assert loaded == [(torch.device("cuda", 1), "bfloat16")]  # device 1, dtype auto resolved for it
    assert seen and set(seen) == {META}


# -- out of memory: halve and go on ----------------------------------------------------------------------------------
@pytest.mark.numeric
def test_a_forward_out_of_memory_once_halves_the_budget_and_finishes(sdpa_model, tokenizer, tmp_path, caplog):  # noqa: F811
    # the peaky SDPA model, as the other tests that compare two batchings: on the plain tiny model the
    # entropy-weighted fusions are ill-conditioned and one kernel level rounds them past the bound
    want = load_features(extract_features(small(), sdpa_model, tokenizer, PROMPTS, out_dir=tmp_path / "a",
                                          progress=False))
    calls = {"n": 0}

    def oom_once(_m, _args, _kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # after the probe and one batch: a part is already written
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    handle = sdpa_model.get_decoder().register_forward_pre_hook(oom_once, with_kwargs=True)
    try:
        with caplog.at_level(logging.WARNING, logger="lengthpred.features.extract"):
            got = load_features(extract_features(small(max_batch_tokens=64), sdpa_model, tokenizer, PROMPTS,
                                                 out_dir=tmp_path / "b", progress=False))
    finally:
        handle.remove()
    assert "out of memory at 64 padded tokens per forward; halving to 32" in caplog.text
    assert got.ids == want.ids
    for name in want.names:  # other batches than the uninterrupted run's: float32 reductions may round apart
        assert_close_f32(got.get(name), want.get(name), sdpa_model.config.vocab_size, both_float32=True,
                         err_msg=name)


def test_vllm_parallelism_is_passed_through_to_the_engine(tmp_path, tokenizer, monkeypatch):
    import sys
    import types

    from lengthpred.generate.backends import make_backend
    from lengthpred.generate.settings import GenerationSettings
    from lengthpred.models.specs import ModelSpec

    seen = {}
    fake = types.ModuleType("vllm")
    fake.LLM = lambda **kw: seen.update(kw)  # what the engine would be built with
    monkeypatch.setitem(sys.modules, "vllm", fake)
    (tmp_path / "config.json").write_text("{}")
    spec = ModelSpec(name="m", path=str(tmp_path), dtype="bfloat16", max_context=4096)
    settings = GenerationSettings(backend="vllm", engine_args={"tensor_parallel_size": 4, "data_parallel_size": 2})
    make_backend(settings, spec, tokenizer=tokenizer)
    assert seen["tensor_parallel_size"] == 4 and seen["data_parallel_size"] == 2
    assert seen["model"] == str(tmp_path) and seen["dtype"] == "bfloat16" and seen["max_model_len"] == 4096


def test_vllm_under_torchrun_is_refused_before_any_work(monkeypatch, tmp_path):
    from lengthpred.stages.generate import run_generate

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    cfg = compose_cfg(["generate.backend=vllm", f"paths.data_dir={tmp_path}", "data=trace", "data.name=none"], tmp_path)
    monkeypatch.setattr("lengthpred.stages.generate.load_prompts", lambda _d: list(range(10)))
    with pytest.raises(ConfigError, match="generate.backend=vllm under torchrun"):
        run_generate(cfg, tmp_path)


def test_the_live_featurizer_moves_its_input_ids(meta_model):
    from lengthpred.serve.featurize import PrefillFeaturizer

    seen: list[torch.device] = []
    handle = record_inputs(meta_model.get_decoder(), seen)
    try:
        with pytest.raises(Reached):
            PrefillFeaturizer(meta_model, 2, threads=None)([5, 6, 7, 8])
    finally:
        handle.remove()
    assert seen and set(seen) == {META}


def test_the_serve_stage_loads_its_readout_model_through_the_stage_loader(monkeypatch):
    from lengthpred.stages import serve
    from tests.conftest import compose_cfg

    loaded = []

    def load_model(cfg):
        loaded.append(str(cfg.device))
        raise Reached

    monkeypatch.setattr(serve, "load_model", load_model)
    with pytest.raises(Reached):
        serve._rls_readout(compose_cfg(["device=cuda:1"]), None, None, {}, None, None)
    assert loaded == ["cuda:1"]  # the config's device reaches the loader (load_model puts the model there)
