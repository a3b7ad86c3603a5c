"""Serving policies as vLLM priorities, and the simulator policy each one is compared with.

vLLM's priority scheduler admits waiting requests in (priority, arrival time, id) order and preempts
only under KV-memory pressure, so each policy here is non-preemptive:

| policy | priority (lower runs first) | simulator policy | predictor label |
|---|---|---|---|
| fcfs | 0 for all (ties go by arrival time) | fcfs | none |
| fcfs-pf | 0 for all, served prefill first like an in-engine readout (below) | fcfs-prefill-first | none |
| sjf | the predicted length, rounded | sjf | the predictor's name |
| oracle | the request's own replayed length | oracle-sjf | clairvoyant |
| sjf-aging | p − weight · waited / p, p the predicted length (re-set before each step) | sjf-aging | the predictor's name |
| oracle-aging | the same with p the replayed length | oracle-sjf-aging | clairvoyant |
| sjf-dist | a distributional head's E[min(L, cap)], rounded (point SJF on that head) | sjf-dist (as sjf) | the key's name |
| sjf-tie | the same head's E + β·CVaR_0.9 (TIE's key, β fixed), rounded | sjf-tie (as sjf) | the key's name |

The aging policies' priorities change while a request waits (`ServePolicy.aged_priority`, the simulator's
`lengthpred.sched.core.policies.AgingSJF` key); the replay re-sets them before every engine step on an engine
that can (`reprioritize`: the fake engine, and vLLM in-process, whose waiting heap is re-keyed).

`sjf-dist` and `sjf-tie` (issue 26) order by two keys of one distributional head read from the engine's own
prefill (`lengthpred.serve.predictor.DistEngineReadout`), so sjf-tie − sjf-dist is what knowing the
uncertainty buys on the same head; β is fixed per run (TIE sets it from the queue when a request is predicted:
the simulator's `<head>:tie-queue` key, `lengthpred.sched.core.predictors.QueueTIEPredictor`).

`fcfs-pf` is the baseline that separates the two things an in-engine readout changes: it serves every
request in the same two phases (the prefill ahead of every decode, then the decode keeps its slot or yields:
`lengthpred.serve.replay`) but orders decodes by arrival, so SJF − fcfs-pf is what the predictions alone buy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lengthpred.errors import ConfigError
from lengthpred.sched.core.policies import AGING_WEIGHT
from lengthpred.sched.sweep.pool import CLAIRVOYANT, NO_PREDICTOR

MAX_PRIORITY = 2**31 - 1


@dataclass(frozen=True)
class ServePolicy:
    name: str
    sim_policy: str  # lengthpred.sched policy the simulator replays it with
    needs_prediction: bool
    ages: bool = False  # the priority falls as the request waits (`aged_priority`)
    weight: float = AGING_WEIGHT  # aging: tokens² per second (lengthpred.sched.core.policies.AgingSJF)
    prefill_first: bool = False  # served in two phases, prefill first, without a prediction (fcfs-pf)
    sim_class: str | None = None  # the simulator's registered policy when `sim_policy` is only a label

    @property
    def sim_make(self) -> str:
        """The simulator policy `make_policy` builds."""
        return self.sim_class or self.sim_policy

    @property
    def oracle(self) -> bool:
        return self.name.startswith("oracle")

    def predictor_label(self, predictor: str) -> str:
        if self.oracle:
            return CLAIRVOYANT
        return predictor if self.needs_prediction else NO_PREDICTOR

    def _length(self, prediction: float | None, length: int) -> float:
        value = float(length) if self.oracle else prediction
        if value is None or not math.isfinite(value):
            raise ConfigError(f"policy {self.name}: no finite prediction for a request ({value})")
        return float(value)

    def priority(self, prediction: float | None, length: int) -> int:
        """The vLLM priority of one request; `prediction` in tokens (None when the policy has none)."""
        if self.name in ("fcfs", "fcfs-pf"):
            return 0
        return int(min(max(round(self._length(prediction, length)), 0), MAX_PRIORITY))

    def aged_priority(self, prediction: float | None, length: int, waited: float) -> int:
        """An aging policy's priority after `waited` seconds: p − weight · waited / p (p ≥ 1), rounded."""
        p = max(self._length(prediction, length), 1.0)
        return int(min(max(round(p - self.weight * waited / p), -MAX_PRIORITY), MAX_PRIORITY))

    def sim_kwargs(self) -> dict[str, float]:
        """The simulator policy's constructor keywords."""
        return {"weight": self.weight} if self.ages else {}


POLICIES = {
    "fcfs": ServePolicy("fcfs", "fcfs", False),
    "sjf": ServePolicy("sjf", "sjf", True),
    "oracle": ServePolicy("oracle", "oracle-sjf", False),
    "sjf-aging": ServePolicy("sjf-aging", "sjf-aging", True, ages=True),
    "oracle-aging": ServePolicy("oracle-aging", "oracle-sjf-aging", False, ages=True),
    "fcfs-pf": ServePolicy("fcfs-pf", "fcfs-prefill-first", False, prefill_first=True, sim_class="fcfs"),
    "sjf-dist": ServePolicy("sjf-dist", "sjf-dist", True, sim_class="sjf"),
    "sjf-tie": ServePolicy("sjf-tie", "sjf-tie", True, sim_class="sjf"),
}
DIST_POLICIES = ("sjf-dist", "sjf-tie")  # keys of a distributional head on the engine's prefill row


def get_policy(name: str, aging_weight: float | None = None) -> ServePolicy:
    """A serving policy; `aging_weight` sets an aging policy's weight (tokens² per second)."""
    if name not in POLICIES:
        raise ConfigError(f"unknown serve policy {name!r}; valid: {', '.join(POLICIES)}")
    pol = POLICIES[name]
    return replace(pol, weight=float(aging_weight)) if pol.ages and aging_weight is not None else pol


def by_sim_policy(sim_policy: str, aging_weight: float | None = None) -> ServePolicy:
    """The serving policy a simulator policy name (a results row's `policy`) stands for."""
    for p in POLICIES.values():
        if p.sim_policy == sim_policy:
            return get_policy(p.name, aging_weight)
    raise ConfigError(f"no serve policy is simulated as {sim_policy!r}")
