"""What the replay loop needs from a serving engine, and what one engine step reports.

An engine takes requests (`add`) with an integer priority (lower runs first; ties by arrival time, then
request id: vLLM's `scheduling_policy="priority"` order) and advances by `step()`. Each step returns a
`StepInfo`: the tokens each request produced and which finished, plus what the scheduler ran in that step
(the inputs of the step-time fit, `lengthpred.serve.profile_fit`) and the queue it left behind.
Two engines implement it: `VLLMEngine` (vLLM in-process) and `FakeEngine` (known step times, for tests).
An engine may also offer `reprioritize(key)`, re-setting its waiting requests' priorities (`key(request id)`)
for the aging policies: the fake engine, and vLLM in-process (its waiting heap is re-keyed; a priority is
otherwise fixed at `add`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lengthpred.errors import LengthpredError


class RequestRejected(LengthpredError):
    """The engine refused a request (prompt too long, bad sampling settings): counted, never dropped."""


@dataclass(frozen=True)
class EngineLimits:
    """The batch limits and KV memory the simulator's profile copies (vLLM's names in comments)."""

    max_batch: int  # max_num_seqs
    token_budget: int  # max_num_batched_tokens
    kv_blocks: int  # KV-cache blocks
    block_size: int  # tokens per block
    max_model_len: int  # prompt + output tokens one request may hold


@dataclass
class StepInfo:
    """One engine step. `batch`, `prefill_tokens`, `ctx_tokens` describe the work scheduled in it:
    requests scheduled, prompt (or recomputed) tokens prefilled, context tokens the batch held."""

    new_tokens: dict[str, int] = field(default_factory=dict)  # request id → tokens produced this step
    finished: list[str] = field(default_factory=list)  # request ids that finished this step
    batch: int = 0
    prefill_tokens: int = 0
    ctx_tokens: int = 0
    n_waiting: int = 0  # requests in the engine's waiting queue after the step
    n_running: int = 0  # requests running after the step
    n_preempted: int = 0  # requests evicted in this step
    token_ids: dict[str, list[int]] = field(default_factory=dict)  # request id → the token ids produced this step
    captured: dict[str, np.ndarray] = field(default_factory=dict)  # request id → its prompt's hidden state (capture)


class Engine(Protocol):
    name: str
    limits: EngineLimits

    def add(self, rid: str, prompt_ids: list[int], max_tokens: int, priority: int, arrival_time: float, *,
            capture: bool = False, cache_salt: str | None = None) -> None:
        """Queue one request that must generate exactly `max_tokens` tokens (an engine with `natural_eos`: at
        most, ending at the model's end of sequence); raise RequestRejected.
        `capture`: report its prompt's hidden state at the predictor's layer in the step that prefills its
        last prompt token (`StepInfo.captured`; an engine built with a capture layer). `cache_salt`: requests
        with the same salt may share cached prompt KV (prefix caching); by default none share."""
        ...

    def step(self) -> StepInfo: ...

    def waiting_keys(self) -> list[tuple[int, float]]:
        """(priority, arrival time) of every request waiting in the engine."""
        ...

    def n_running(self) -> int: ...

    def set_priority(self, rid: str, priority: int) -> None:
        """A running request's priority from now on (the order in which memory pressure would evict)."""
        ...

    def has_unfinished(self) -> bool: ...

    def abort(self, rids: list[str]) -> None: ...
