"""LAPS-SD's early acceptance estimate Â: what its policy reads in the simulator (no look-ahead).

Measured per-request acceptance sequences come from `lengthpred.sched.spec.acceptance`; this module only turns
one into the (k_stable, Â) the scheduler sees, so the simulator's policies need nothing from the spec package.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lengthpred.errors import ConfigError

__all__ = ["early_acceptance", "early_estimates"]


def early_acceptance(accepted: Sequence[int], k: int, n_draft: int) -> float:
    """Â from the first `k` decode steps (steps 1..k, after the prefill step): accepted draft tokens per
    drafted position, a step without a proposal counting as none accepted (what the step rate sees). A
    request with fewer decode steps uses those it has; none: 0."""
    a = np.asarray(accepted[1: 1 + k], dtype=float)
    return float(a.sum() / (n_draft * len(a))) if len(a) else 0.0


def early_estimates(seqs: Sequence[Sequence[int]], n_draft: int, *, stability: str = "steps", min_steps: int = 8,
                    tol: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """LAPS-SD's (k_stable, Â) per request from its measured sequence, as the scheduler would see it.

    k_stable counts steps of service, the prefill step included, as the simulator does; after s steps the
    scheduler has seen the s − 1 decode steps after the prefill, and Â is their acceptance (no look-ahead).
    ``steps``: s = max(min_steps, 2). ``stderr``: the first s >= 2 at which the plug-in binomial standard error
    √(Â(1 − Â)/(n_draft·(s − 1))) is at most `tol`; a request that never gets there is never perceptible
    (k_stable past its last step). The plug-in error is 0 when Â is 0 or 1, so a request whose first decode
    step drafts nothing (common with n-gram drafting) becomes perceptible at once with Â = 0."""
    n = len(seqs)
    ks = np.empty(n, dtype=np.int64)
    a_hat = np.empty(n, dtype=float)
    for i, seq in enumerate(seqs):
        acc = np.asarray(seq[1:], dtype=float)  # decode steps
        if stability == "steps":
            s = max(int(min_steps), 2)
        elif stability == "stderr":
            if len(acc) == 0:
                s = len(seq) + 1
            else:
                m = np.arange(1, len(acc) + 1)  # decode steps seen
                est = np.cumsum(acc) / (n_draft * m)
                ok = np.flatnonzero(est * (1 - est) <= n_draft * m * tol**2)
                s = int(ok[0]) + 2 if ok.size else len(seq) + 1
        else:
            raise ConfigError(f"laps-sd stability {stability!r}; valid: steps, stderr")
        ks[i] = s
        a_hat[i] = min(1.0, early_acceptance(seq, s - 1, n_draft))
    return ks, a_hat
