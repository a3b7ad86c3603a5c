"""An in-process fake engine with known step times: the reference the replay loop, the priority mapping,
the metrics and the profile fit are tested against.

It serves like vLLM's priority scheduler without memory pressure: each step first admits waiting
requests in (priority, arrival time, id) order while the batch has room, filling at most the token budget
with prefill (the first prompt always fits); then every running request makes one token. A step takes
exactly `profile.step_time(B, C) + t_prefill_token·P` (B requests, C context tokens = prompt + tokens made
so far, P prompt tokens prefilled), spent on its clock, which is the simulator's cost model
(`lengthpred.sched.core.hardware`): replayed on a virtual clock, a run and its simulation agree.

Like vLLM with prefix caching and salted requests, a request added with a `cache_salt` reuses the full KV
blocks of the prompt an earlier request with that salt computed (it prefills only the rest); a request
added with `capture=True` reports `fake_state(prompt)` as its prompt's hidden state in its prefill step.
With `natural` (a function of the prompt's token ids) an answer ends at that many tokens, `max_tokens` being
its cap, like vLLM without `ignore_eos`; a request re-added with the salt of an earlier one (a decode phase)
continues that answer.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.engine import EngineLimits, RequestRejected, StepInfo


@dataclass
class _Req:
    rid: str
    prompt: int
    max_tokens: int
    made: int = 0
    prefill: int = 0  # prompt tokens its admission computes (the rest are cached)
    capture: bool = False
    salt: str | None = None
    prompt_ids: tuple[int, ...] = ()


def fake_state(prompt_ids: list[int] | tuple[int, ...]) -> np.ndarray:
    """The fake engine's "hidden state" of a prompt: [1, length / 100, a hash of its tokens in [0, 1)]."""
    return np.array([1.0, len(prompt_ids) / 100.0, (sum(int(x) * (k + 1) for k, x in enumerate(prompt_ids)) % 97) / 97.0])


def fake_natural_length(prompt_ids: tuple[int, ...]) -> int:
    """The fake engine's natural answer length of a prompt (serve.answers=natural on kind=fake): 1 to 200 tokens,
    a hash of its tokens."""
    return 1 + (sum(int(x) * (k + 3) for k, x in enumerate(prompt_ids)) * 2654435761) % 200


class FakeEngine:
    name = "fake"

    def __init__(self, profile: HardwareProfile, clock, *, max_model_len: int = 2048, state=None,
                 natural: Callable[[tuple[int, ...]], int] | None = None) -> None:
        """`state(prompt_ids) -> [d]`: the captured hidden state (default `fake_state`); `natural(prompt_ids)`:
        the answer's own length (None: every request makes exactly `max_tokens`)."""
        self.profile, self.clock = profile, clock
        self.state = state or fake_state
        self.natural = natural
        self.natural_eos = natural is not None
        self._answer: dict[str, tuple[int, int]] = {}  # salt → (its first prompt's length, natural answer length)
        self.capture = None  # the vLLM engine's hook object; the fake engine's capture costs nothing
        self.limits = EngineLimits(profile.max_batch, profile.token_budget, profile.kv_blocks, profile.block_size,
                                   max_model_len)
        self._waiting: list[tuple[int, float, str, _Req]] = []
        self._running: list[_Req] = []
        self._kv: dict[str, tuple[int, ...]] = {}  # salt → prompt tokens computed (prefix cache)
        self.steps = 0

    def add(self, rid: str, prompt_ids: list[int], max_tokens: int, priority: int, arrival_time: float, *,
            capture: bool = False, cache_salt: str | None = None) -> None:
        if not prompt_ids:
            raise RequestRejected(f"request {rid}: empty prompt")
        if max_tokens < 1:
            raise RequestRejected(f"request {rid}: max_tokens={max_tokens} must be >= 1")
        if len(prompt_ids) + max_tokens > self.limits.max_model_len:
            raise RequestRejected(f"request {rid}: {len(prompt_ids)} prompt + {max_tokens} output tokens exceed "
                                  f"max_model_len={self.limits.max_model_len}")
        ids = tuple(int(x) for x in prompt_ids)
        cached = 0
        if cache_salt is not None and cache_salt in self._kv:
            old = self._kv[cache_salt]
            same = next((k for k, (a, b) in enumerate(zip(old, ids, strict=False)) if a != b), min(len(old), len(ids)))
            bs = self.limits.block_size
            cached = bs * (min(same, len(ids) - 1) // bs)  # full blocks only; at least one token is computed
        if self.natural is not None:
            key = cache_salt or rid
            first, n = self._answer.setdefault(key, (len(ids), int(self.natural(ids))))
            max_tokens = max(1, min(max_tokens, n - (len(ids) - first)))  # a decode phase continues the answer
        req = _Req(rid, len(ids), max_tokens, prefill=len(ids) - cached, capture=capture, salt=cache_salt,
                   prompt_ids=ids)
        heapq.heappush(self._waiting, (int(priority), float(arrival_time), rid, req))

    def step(self) -> StepInfo:
        prof = self.profile
        prefill = 0
        admitted: list[_Req] = []
        while self._waiting and len(self._running) < prof.max_batch:
            r = self._waiting[0][3]
            if prefill and prefill + r.prefill > prof.token_budget - len(self._running):
                break  # this step's token budget is spent
            heapq.heappop(self._waiting)
            prefill += r.prefill
            self._running.append(r)
            admitted.append(r)
        if not self._running:
            return StepInfo(n_waiting=len(self._waiting))
        b = len(self._running)
        ctx = sum(r.prompt + r.made for r in self._running)
        self.clock.advance(prof.step_time(b, ctx) + prof.t_prefill_token * prefill)
        self.steps += 1
        info = StepInfo(batch=b, prefill_tokens=prefill, ctx_tokens=ctx)
        for r in admitted:
            if r.salt is not None:
                self._kv[r.salt] = r.prompt_ids
            if r.capture:
                info.captured[r.rid] = np.asarray(self.state(list(r.prompt_ids)), dtype=np.float64)
        for r in self._running:
            r.made += 1
            info.new_tokens[r.rid] = 1
            info.token_ids[r.rid] = [0]
            if r.made >= r.max_tokens:
                info.finished.append(r.rid)
        done = set(info.finished)
        self._running = [r for r in self._running if r.rid not in done]
        info.n_waiting, info.n_running = len(self._waiting), len(self._running)
        return info

    def waiting_keys(self) -> list[tuple[int, float]]:
        return [(p, a) for p, a, _, _ in self._waiting]

    def n_running(self) -> int:
        return len(self._running)

    def set_priority(self, rid: str, priority: int) -> None:
        pass  # no memory pressure here: a running request's priority never matters

    def reprioritize(self, key: Callable[[str], int]) -> None:
        """Give every waiting request the priority `key(request id)` (an aging policy's key, re-set each step)."""
        self._waiting = [(int(key(rid)), t, rid, r) for _, t, rid, r in self._waiting]
        heapq.heapify(self._waiting)

    def has_unfinished(self) -> bool:
        return bool(self._waiting or self._running)

    def abort(self, rids: list[str]) -> None:
        gone = set(rids)
        self._running = [r for r in self._running if r.rid not in gone]
        self._waiting = [w for w in self._waiting if w[2] not in gone]
        heapq.heapify(self._waiting)
