"""SJF with aging relative to the predicted length (issue 24, item 6): the simulator re-keys the waiting
queue as requests wait, a long request that waited long enough goes ahead of a newer short one, weight 0 is
plain SJF, and the serving replay gives the same order as the simulator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from lengthpred.errors import ConfigError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.policies import AGING_WEIGHT, make_policy
from lengthpred.sched.core.simulator import OverloadWarning, simulate
from lengthpred.sched.core.workload import Workload
from lengthpred.serve.clock import VirtualClock
from lengthpred.serve.fake import FakeEngine
from lengthpred.serve.fidelity import simulate_run
from lengthpred.serve.predictor import NoPredictor
from lengthpred.serve.priority import get_policy
from lengthpred.serve.replay import replay
from lengthpred.serve.workload import ServeRequest

ONE = HardwareProfile("one-slot", t_base=0.07, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                      max_batch=1, token_budget=4096, kv_blocks=100_000, block_size=16)
# a 100-token request runs from t = 0 (7 s); a long one (100 tokens) waits from 0.01 s, a short one (10)
# arrives at 6.9 s. When the slot frees (7.0 s) the keys are 100 − w·6.99/100 and 10 − w·0.1/10: the long
# request goes first once w > 90 / (0.0699 − 0.01) ≈ 1503 tokens²/s
WL = Workload(np.array([0.0, 0.01, 6.9]), np.array([5, 5, 5]), np.array([100, 100, 10]))


def _order(policy: str, **kw: float) -> list[int]:
    with warnings.catch_warnings():  # 3 requests on one slot are above its capacity on purpose
        warnings.simplefilter("ignore", OverloadWarning)
        res = simulate(WL, ONE, make_policy(policy, **kw), WL.output.astype(float), horizon=1e6)
    return list(np.argsort(res.first_admit))


def test_aging_lets_a_long_request_that_waited_go_ahead_of_a_new_short_one():
    assert _order("sjf") == [0, 2, 1]
    assert _order("sjf-aging", weight=0.0) == [0, 2, 1]  # no aging: plain SJF
    assert _order("sjf-aging", weight=1400.0) == [0, 2, 1]
    assert _order("sjf-aging", weight=1600.0) == [0, 1, 2]
    assert _order("oracle-sjf-aging", weight=1600.0) == [0, 1, 2]
    with pytest.raises(ConfigError, match="weight"):
        make_policy("sjf-aging", weight=-1.0)


def test_aging_bounds_the_longest_wait_under_a_stream_of_short_requests():
    rng = np.random.default_rng(0)  # 5-14 token requests at 0.95 of the slot's capacity: SJF starves the 14s
    n = 400
    arr = np.r_[0.0, 0.01, np.cumsum(rng.exponential(0.74, n - 2)) + 0.02]
    out = np.r_[20, 200, rng.integers(5, 15, n - 2)]
    wl = Workload(arr, np.full(n, 5), out)
    longest = {}
    for name, kw in (("fcfs", {}), ("sjf", {}), ("sjf-aging", {"weight": 2000.0})):
        res = simulate(wl, ONE, make_policy(name, **kw), out.astype(float), horizon=1e6)
        longest[name] = float(np.max(res.first_admit - arr))
    assert longest["sjf"] > 2 * longest["fcfs"] and longest["sjf-aging"] < 0.5 * longest["sjf"]


def test_the_replay_ages_priorities_on_the_engine_as_the_simulator_does():
    reqs = [ServeRequest(f"r{i}", f"p{i}", [1] * 5, int(WL.output[i]), float(WL.arrival[i]), float(WL.output[i]))
            for i in range(3)]
    for w, order in ((1400.0, ["r0", "r2", "r1"]), (1600.0, ["r0", "r1", "r2"])):
        pol = get_policy("oracle-aging", aging_weight=w)
        clock = VirtualClock()
        run = replay(reqs, FakeEngine(ONE, clock), pol, NoPredictor(), clock)
        assert run.requests.sort_values("first_token")["rid"].tolist() == order
        sim = simulate_run(run.requests, pol, ONE)
        np.testing.assert_allclose(sim["finish"], run.requests["finish"], rtol=1e-9)
    assert get_policy("oracle-aging").aged_priority(None, 100, 6.99) == round(100 - AGING_WEIGHT * 6.99 / 100)


def test_aging_policies_run_on_vllm_with_either_predictor_source():
    """vLLM's waiting heap is re-keyed in-process (VLLMEngine.reprioritize); with the engine readout a decode
    ages from its arrival once its prefill has predicted (tests/test_serve_engine_readout.py)."""
    from lengthpred.stages.serve import settings_from_cfg

    from .conftest import compose_cfg

    assert settings_from_cfg(compose_cfg(["serve.policies=[fcfs,sjf-aging]"])).policies == ["fcfs", "sjf-aging"]
    s = settings_from_cfg(compose_cfg(["serve.policies=[fcfs,sjf-aging,oracle-aging]", "serve.predictor.source=worker"]))
    assert s.policies == ["fcfs", "sjf-aging", "oracle-aging"]


def test_aging_reads_the_engine_prefill_like_sjf():
    """With the engine readout, sjf-aging gets the same in-engine predictor as sjf (it had a NoPredictor, and a
    vLLM run stopped at its first request: 'no finite prediction')."""
    from types import SimpleNamespace

    from lengthpred.online.rls import RLSRegressor
    from lengthpred.stages.serve import predictor_factory

    from .conftest import compose_cfg

    rng = np.random.default_rng(0)
    est = RLSRegressor(1.0).fit(rng.normal(size=(20, 4)), rng.uniform(5, 50, 20))
    cfg = compose_cfg(["serve.policies=[fcfs,sjf,sjf-aging]"])
    make = predictor_factory(cfg, None, None, {}, None, None, readout=(None, est),
                             engine=SimpleNamespace(capture=None))
    for policy in ("sjf", "sjf-aging"):
        label, pred = make(policy)
        assert getattr(pred, "in_engine", False) and label.endswith("+engine"), policy
    assert isinstance(make("fcfs")[1], NoPredictor)
