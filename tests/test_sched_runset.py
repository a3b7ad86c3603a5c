"""The running batch's two forms (lazy heaps, numpy slots) pick the same request to preempt."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lengthpred.sched import CallablePredictor, OnlineScaledPredictor, get_profile, make_policy
from lengthpred.sched.core.policies import SchedContext, _level, _level_start
from lengthpred.sched.core.predictors import ArrayPredictor, OraclePredictor
from lengthpred.sched.core.runset import HeapRunSet, SlotRunSet, make_runset


def _bind(policy, n: int, seed: int, speculative: bool = False, predictor=None, integer_pred: bool = False):
    rng = np.random.default_rng(seed)
    out = np.maximum(1, rng.lognormal(4, 1, n).astype(np.int64))
    pred = np.maximum(1.0, rng.lognormal(4, 1, n))
    if integer_pred:  # many equal keys: the tie-break decides
        pred = np.round(pred / 20) * 20 + 1
    acc = rng.beta(7, 3, n)
    prof = get_profile("a100-llama2-7b")
    rate = prof.n_draft * acc + 1 if speculative else np.ones(n)
    predictor = ArrayPredictor(pred) if predictor is None else predictor
    values = getattr(predictor, "values", pred)
    ctx = SchedContext(np.sort(rng.uniform(0, 100, n)), out, values.copy(), predictor, rate, acc, prof,
                       speculative, np.random.default_rng(seed))
    policy.bind(ctx)
    return ctx


def _replay(policy, ctx, seed: int, aging: float, limit: float, n_ops: int = 600) -> int:
    """Random admissions, completions and queries at rising global steps, run on both forms at once."""
    rng = np.random.default_rng(seed)
    n = len(ctx.output)
    G0, steps0, tok0, npre = [0] * n, [0] * n, [0.0] * n, [0] * n
    rate = ctx.rate.tolist()
    state = (G0, steps0, tok0, rate, npre)
    arr = ctx.arrival.tolist()
    heap, slot = (cls(policy, state, arr, aging, limit, 64) for cls in (HeapRunSet, SlotRunSet))
    running, idle, G, checked = [], list(range(n)), 0, 0
    for _ in range(n_ops):
        op = rng.random()
        if op < 0.45 and idle and len(running) < 64:
            i = idle.pop(int(rng.integers(len(idle))))
            steps0[i] = int(rng.integers(0, 300)) if rng.random() < 0.5 else 0
            tok0[i] = steps0[i] * rate[i]
            npre[i] = int(rng.integers(0, 3))
            G0[i] = G
            heap.add(i, G)
            slot.add(i, G)
            running.append(i)
        elif op < 0.7 and running:
            i = running.pop(int(rng.integers(len(running))))
            d = G - G0[i]  # its progress, as the simulator banks it on preemption
            steps0[i] += d
            tok0[i] += rate[i] * d
            heap.remove(i)
            slot.remove(i)
            idle.append(i)
        else:
            G += int(rng.integers(0, 40))
        t = float(G) * 0.01 + 100.0
        for capped in (False, True):
            got, want = heap.worst(G, t, capped), slot.worst(G, t, capped)
            if want[1] == -1 or (capped and want[0] == -math.inf):
                assert got[0] == -math.inf
                continue
            assert got == want, (G, capped)
            checked += 1
        assert heap.slots == slot.slots
    return checked


POLICIES = [("fcfs", {}, False), ("sjf", {}, False), ("oracle-sjf", {}, False), ("srpt", {}, False),
            ("oracle-srpt", {}, False), ("mlfq", {}, False), ("mlfq", {"quantum": 3, "n_levels": 4}, False),
            ("las", {"quantum": 1, "n_levels": 12}, False), ("mlfq", {}, True),
            # keys that fall at per-request rates: groups whose slope only bounds the change
            ("srpt", {}, True), ("oracle-srpt", {}, True), ("laps-sd", {}, True), ("laps-sd", {}, False),
            ("laps-sd", {"stability": "stderr", "tol": 0.05, "quantum": 4}, True),
            ("laps-sd", {"oracle": True, "perceptible_first": True, "min_steps": 40}, True)]


@pytest.mark.parametrize("name,kw,speculative", POLICIES)
@pytest.mark.parametrize("aging,limit,integer_pred", [(0.0, 2, False), (3.0, math.inf, False), (0.0, 1, True)])
def test_heap_form_matches_the_numpy_form(name, kw, speculative, aging, limit, integer_pred):
    policy = make_policy(name, **kw)
    ctx = _bind(policy, 300, seed=len(name), speculative=speculative, integer_pred=integer_pred)
    assert isinstance(make_runset(policy, ([0] * 300,) * 5, [0.0] * 300, 0.0, 2, 4), HeapRunSet)
    assert _replay(policy, ctx, seed=7, aging=aging, limit=limit) > 300


@pytest.mark.parametrize("predictor", ["online", "callable", "oracle"])
def test_srpt_heap_form_with_other_predictors(predictor):
    rng = np.random.default_rng(0)
    base = np.maximum(1.0, rng.lognormal(4, 1, 300))
    pr = {"online": OnlineScaledPredictor(base), "callable": CallablePredictor(lambda i, now: 1.0),
          "oracle": OraclePredictor(np.round(base))}[predictor]
    policy = make_policy("srpt")
    ctx = _bind(policy, 300, seed=1, predictor=pr)
    assert policy.slopes == (-1.0,)
    assert _replay(policy, ctx, seed=3, aging=0.0, limit=2) > 300


def test_the_numpy_form_serves_a_predictor_with_its_own_remaining():
    class OwnRemaining(ArrayPredictor):
        def remaining(self, i: int, generated: float) -> float:
            return 1.0

    for spec in (False, True):
        policy = make_policy("srpt")
        _bind(policy, 10, seed=0, speculative=spec, predictor=OwnRemaining(np.ones(10)))
        assert policy.slopes is None
        assert isinstance(make_runset(policy, ([0] * 10,) * 5, [0.0] * 10, 0.0, 2, 4), SlotRunSet)


@pytest.mark.parametrize("kw", [{}, {"stability": "stderr", "tol": 0.05}, {"oracle": True, "perceptible_first": True}])
def test_laps_sd_vectorised_keys_equal_its_scalar_keys_bit_for_bit(kw):
    policy = make_policy("laps-sd", **kw)
    ctx = _bind(policy, 500, seed=2, speculative=True)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 500, 2000)
    steps = rng.integers(0, 400, 2000)
    tokens = steps * ctx.rate[idx]
    vec = policy.running_keys(idx, steps, tokens)
    scalar = [policy.running_key(int(i), int(s), float(t)) for i, s, t in zip(idx, steps, tokens, strict=True)]
    assert vec.tolist() == scalar


@pytest.mark.parametrize("quantum,n_levels", [(1, 12), (3, 6), (16, 8)])
def test_level_boundaries_agree_with_the_level_formula(quantum, n_levels):
    for lvl in range(1, n_levels):
        s = _level_start(lvl, quantum)
        assert _level(s, quantum, n_levels) == lvl and _level(s - 1, quantum, n_levels) == lvl - 1
    policy = make_policy("mlfq", quantum=quantum, n_levels=n_levels)
    _bind(policy, 5, seed=0)
    for steps in range(0, quantum * 2**n_levels):
        g, _, nxt = policy.segment(0, steps, float(steps))
        assert g == _level(steps, quantum, n_levels)
        if nxt:
            assert _level(steps + nxt - 1, quantum, n_levels) == g < _level(steps + nxt, quantum, n_levels)
        else:
            assert g == n_levels - 1
