"""A_min (Chen, Ye & Zhou, arXiv 2508.14544): schedule by a lower bound of the length, raised as tokens come.

Each request starts with a predicted lower bound ℓ (e.g. a distributional head's 0.1-quantile); its key is
its current estimate of the total length, max(ℓ, tokens generated + 1): a request that outlives its bound
is known to be at least as long as it has run, and its key grows with it. Shortest estimate first; with
`preemptive=True` (the default) a waiting request with a smaller estimate may evict the running one with
the largest (the simulator's preemption rules and `max_preemptions` cap apply), so a long request hiding
behind a small bound is caught once it passes the waiting requests' bounds. Keys change only through
progress, so the policy needs no re-check tick; it leaves `slopes` unset (the batch's keys are recomputed).
"""

from __future__ import annotations

import numpy as np

from lengthpred.sched.core.policies import POLICIES, SchedContext, _LengthPolicy


@POLICIES.register("amin")
class AMin(_LengthPolicy):
    """Lower-bound-first with the bound raised to the tokens generated (module docstring)."""

    name = "amin"

    def __init__(self, *, preemptive: bool = True, oracle: bool = False) -> None:
        super().__init__(oracle=oracle)
        self.preemptive = preemptive

    def bind(self, ctx: SchedContext) -> None:
        super().bind(ctx)
        self.slopes = self.bounds = None

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        return max(self._total(i), tokens + 1.0)

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return np.maximum(self._totals(idx), np.asarray(tokens, dtype=float) + 1.0)


__all__ = ["AMin"]
