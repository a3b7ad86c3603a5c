"""What preemption costs the server: tokens prefilled again (recompute) and the time spent on them or on
swapping KV, per run (SimResult.recompute_tokens / preempt_seconds, summarize's preempt_overhead)."""

from __future__ import annotations

import math
import warnings

import pytest

from lengthpred.sched import get_profile, make_policy, simulate
from lengthpred.sched.core.metrics import summarize
from tests.test_sched_preempt_cap import memory_bound  # noqa: F401  (the loaded, memory-bound workload)


def _run(wl, prof, policy, preemption):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(wl, prof, make_policy(policy), preemption=preemption, max_preemptions=None,
                       horizon=math.inf)  # served to the end: every evicted request comes back
    assert res.finished.all()
    return res


def test_recompute_counts_every_readmission_between_its_prompt_and_its_whole_context(memory_bound):  # noqa: F811
    wl, prof = memory_bound
    res = _run(wl, prof, "mlfq", "recompute")
    k = res.n_preempt
    assert k.sum() > 0
    # each re-admission prefills the prompt plus what was generated so far (less than the whole answer)
    assert (wl.prompt * k).sum() <= res.recompute_tokens <= ((wl.prompt + wl.output) * k).sum()
    assert res.preempt_seconds == pytest.approx(prof.t_prefill_token * res.recompute_tokens)
    m = summarize(res)
    assert m["recompute_tokens"] == res.recompute_tokens
    assert 0 < m["preempt_overhead"] < 1


def test_swap_recomputes_nothing_and_pays_both_ways(memory_bound):  # noqa: F811
    wl, prof = memory_bound
    res = _run(wl, prof, "mlfq", "swap")
    k = res.n_preempt
    assert k.sum() > 0 and res.recompute_tokens == 0
    # out and back in: at least the prompt each way, at most the whole context
    lo, hi = (2 * prof.t_swap_token * (x * k).sum() for x in (wl.prompt, wl.prompt + wl.output))
    assert lo <= res.preempt_seconds <= hi


def test_no_preemption_costs_nothing(memory_bound):  # noqa: F811
    wl, _ = memory_bound
    roomy = get_profile("a100-llama2-7b", {"max_batch": 32, "kv_blocks": 1_000_000})
    res = _run(wl, roomy, "fcfs", "recompute")
    assert res.n_preempt.sum() == 0 and res.recompute_tokens == 0 and res.preempt_seconds == 0
    assert summarize(res)["preempt_overhead"] == 0
