"""An in-process fake engine with known step times: the reference the replay loop, the priority mapping,
the metrics and the profile fit are tested against.

It serves like vLLM's priority scheduler without memory pressure: each step first admits waiting
requests in (priority, arrival time, id) order while the batch has room, filling at most the token budget
with prefill (the first prompt always fits); then every running request makes one token. A step takes
exactly `profile.step_time(B, C) + t_prefill_token·P` (B requests, C context tokens = prompt + tokens made
so far, P prompt tokens prefilled), spent on its clock, which is the simulator's cost model
(`lengthpred.sched.hardware`): replayed on a virtual clock, a run and its simulation agree.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from lengthpred.sched.hardware import HardwareProfile
from lengthpred.serve.engine import EngineLimits, RequestRejected, StepInfo


@dataclass
class _Req:
    rid: str
    prompt: int
    max_tokens: int
    made: int = 0


class FakeEngine:
    name = "fake"

    def __init__(self, profile: HardwareProfile, clock, *, max_model_len: int = 2048) -> None:
        self.profile, self.clock = profile, clock
        self.limits = EngineLimits(profile.max_batch, profile.token_budget, profile.kv_blocks, profile.block_size,
                                   max_model_len)
        self._waiting: list[tuple[int, float, str, _Req]] = []
        self._running: list[_Req] = []
        self.steps = 0

    def add(self, rid: str, prompt_ids: list[int], max_tokens: int, priority: int, arrival_time: float) -> None:
        if not prompt_ids:
            raise RequestRejected(f"request {rid}: empty prompt")
        if max_tokens < 1:
            raise RequestRejected(f"request {rid}: max_tokens={max_tokens} must be >= 1")
        if len(prompt_ids) + max_tokens > self.limits.max_model_len:
            raise RequestRejected(f"request {rid}: {len(prompt_ids)} prompt + {max_tokens} output tokens exceed "
                                  f"max_model_len={self.limits.max_model_len}")
        heapq.heappush(self._waiting, (int(priority), float(arrival_time), rid, _Req(rid, len(prompt_ids), max_tokens)))

    def step(self) -> StepInfo:
        prof = self.profile
        prefill = 0
        while self._waiting and len(self._running) < prof.max_batch:
            r = self._waiting[0][3]
            if prefill and prefill + r.prompt > prof.token_budget - len(self._running):
                break  # this step's token budget is spent
            heapq.heappop(self._waiting)
            prefill += r.prompt
            self._running.append(r)
        if not self._running:
            return StepInfo(n_waiting=len(self._waiting))
        b = len(self._running)
        ctx = sum(r.prompt + r.made for r in self._running)
        self.clock.advance(prof.step_time(b, ctx) + prof.t_prefill_token * prefill)
        self.steps += 1
        info = StepInfo(batch=b, prefill_tokens=prefill, ctx_tokens=ctx)
        for r in self._running:
            r.made += 1
            info.new_tokens[r.rid] = 1
            if r.made >= r.max_tokens:
                info.finished.append(r.rid)
        done = set(info.finished)
        self._running = [r for r in self._running if r.rid not in done]
        info.n_waiting, info.n_running = len(self._waiting), len(self._running)
        return info

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
