"""Completion models: capacity calibrated to the named hardware profile, load below capacity, labels seen."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.errors import ConfigError
from lengthpred.online import InstantCompletion, SchedulerCompletion, ServingCompletion
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.core.workload import capacity
from tests.conftest import compose_cfg


def _lengths(n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(np.exp(np.log(200) + 0.8 * rng.standard_normal(n))), 5, 512)


def _labels_seen(arrival: np.ndarray, done: np.ndarray) -> np.ndarray:
    return np.array([int((done < a).sum()) for a in arrival])


def test_scheduler_capacity_is_the_named_profiles_and_overload_runs_at_it():
    y = _lengths()
    comp = SchedulerCompletion(hardware="cpu-smollm2-135m", load=3.0, prompt_tokens=128)
    want = capacity(get_profile("cpu-smollm2-135m"), np.full(len(y), 128), y.astype(np.int64))
    assert comp.capacity(y) == pytest.approx(want)
    arr, done = comp.schedule(y)
    assert comp.info_["arrival_rate"] == pytest.approx(3.0 * want) and comp.info_["load"] == 3.0
    # saturated, the simulated server completes requests at the profile's capacity (±10%)
    d = np.sort(done[np.isfinite(done)])
    realised = (len(d) - 51) / (d[-1] - d[50])
    assert realised == pytest.approx(want, rel=0.10)


def test_below_capacity_every_label_arrives_at_the_offered_rate():
    y = _lengths()
    comp = SchedulerCompletion(load=0.7, prompt_tokens=128)
    arr, done = comp.schedule(y)
    assert np.isfinite(done).all()  # below capacity the simulator finishes every request
    seen = _labels_seen(arr, done)
    in_flight = np.arange(len(y)) - seen
    # Little's law with Poisson arrivals (they see time averages): requests in flight ≈ rate × sojourn
    assert in_flight.mean() == pytest.approx(comp.info_["arrival_rate"] * np.mean(done - arr), rel=0.25)
    assert in_flight.mean() < 10 and (seen >= 10).mean() > 0.9
    # overloaded, the same stream starves: far fewer labels per prediction
    over = SchedulerCompletion(load=3.0, prompt_tokens=128)
    seen_over = _labels_seen(*over.schedule(y))
    assert seen_over.mean() < 0.5 * seen.mean()


def test_serving_capacity_matches_its_own_slots():
    y = np.full(400, 100.0)
    comp = ServingCompletion(load=4.0, tokens_per_s=20.0, max_concurrency=4, prefill_s=1.0)
    assert comp.capacity(y) == pytest.approx(4 / (1.0 + 100 / 20))
    arr, done = comp.schedule(y)
    d = np.sort(done)
    assert (len(d) - 101) / (d[-1] - d[100]) == pytest.approx(comp.capacity(y), rel=0.02)
    below = ServingCompletion(load=0.5, tokens_per_s=20.0, max_concurrency=4, prefill_s=1.0)
    seen = _labels_seen(*below.schedule(y))
    assert (np.arange(len(y)) - seen).mean() < 5


@pytest.mark.parametrize("cls", [ServingCompletion, SchedulerCompletion])
def test_exactly_one_of_load_and_arrival_rate(cls):
    with pytest.raises(ConfigError, match="exactly one"):
        cls(load=0.7, arrival_rate=1.0).schedule(np.ones(4) * 10)
    with pytest.raises(ConfigError, match="exactly one"):
        cls(load=None, arrival_rate=None).schedule(np.ones(4) * 10)
    with pytest.raises(ConfigError):
        cls(load=-1.0).schedule(np.ones(4) * 10)


def test_default_stream_completion_runs_the_calibrated_profile_below_capacity(tmp_path):
    from lengthpred.stages.adapt import build_completion

    comp = build_completion(compose_cfg([], tmp_path).online)
    assert isinstance(comp, SchedulerCompletion) and comp.hardware == "cpu-smollm2-135m"
    assert 0 < comp.load < 1 and comp.arrival_rate is None
    for option in ("serving", "simulated"):
        c = build_completion(compose_cfg([f"online/completion={option}"], tmp_path).online)
        assert 0 < c.load < 1


def test_instant_reveals_every_earlier_label():
    arr, done = InstantCompletion().schedule(np.ones(5))
    assert list(_labels_seen(arr, done)) == [0, 1, 2, 3, 4]
