"""Serving policies as vLLM priorities, and the simulator policy each one is compared with.

vLLM's priority scheduler admits waiting requests in (priority, arrival time, id) order and preempts
only under KV-memory pressure, so each policy here is non-preemptive:

| policy | priority (lower runs first) | simulator policy | predictor label |
|---|---|---|---|
| fcfs | 0 for all (ties go by arrival time) | fcfs | none |
| sjf | the predicted length, rounded | sjf | the predictor's name |
| oracle | the request's own replayed length | oracle-sjf | clairvoyant |
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lengthpred.errors import ConfigError
from lengthpred.sched.pool import CLAIRVOYANT, NO_PREDICTOR

MAX_PRIORITY = 2**31 - 1


@dataclass(frozen=True)
class ServePolicy:
    name: str
    sim_policy: str  # lengthpred.sched policy the simulator replays it with
    needs_prediction: bool

    def predictor_label(self, predictor: str) -> str:
        if self.name == "oracle":
            return CLAIRVOYANT
        return predictor if self.needs_prediction else NO_PREDICTOR

    def priority(self, prediction: float | None, length: int) -> int:
        """The vLLM priority of one request; `prediction` in tokens (None when the policy has none)."""
        if self.name == "fcfs":
            return 0
        value = float(length) if self.name == "oracle" else prediction
        if value is None or not math.isfinite(value):
            raise ConfigError(f"policy {self.name}: no finite prediction for a request ({value})")
        return int(min(max(round(value), 0), MAX_PRIORITY))


POLICIES = {
    "fcfs": ServePolicy("fcfs", "fcfs", False),
    "sjf": ServePolicy("sjf", "sjf", True),
    "oracle": ServePolicy("oracle", "oracle-sjf", False),
}


def get_policy(name: str) -> ServePolicy:
    if name not in POLICIES:
        raise ConfigError(f"unknown serve policy {name!r}; valid: {', '.join(POLICIES)}")
    return POLICIES[name]


def by_sim_policy(sim_policy: str) -> ServePolicy:
    """The serving policy a simulator policy name (a results row's `policy`) stands for."""
    for p in POLICIES.values():
        if p.sim_policy == sim_policy:
            return p
    raise ConfigError(f"no serve policy is simulated as {sim_policy!r}")
