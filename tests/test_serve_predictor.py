"""Predictions in the request path: the RLS readout answering from prefill rows, updated asynchronously
from completions, on stored rows (ready at arrival) and live on a worker (ready later, and the wait counted)."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
import torch

from lengthpred.errors import ConfigError, DataError
from lengthpred.online.rls import RLSRegressor
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve import (
    FakeEngine,
    OnlineReadout,
    ServeRequest,
    TablePredictor,
    VirtualClock,
    WallClock,
    get_policy,
    replay,
)
from lengthpred.serve.featurize import PrefillFeaturizer, cached_rows
from tests.tolerances import assert_close_f32

D = 6


def _setup(n: int = 24, seed: int = 0):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=D)
    rows = {f"p{i}": rng.normal(size=D) for i in range(n)}
    lengths = {k: int(np.clip(np.expm1(3.5 + 0.6 * v @ W / np.sqrt(D)), 2, 150)) for k, v in rows.items()}
    Xtr = rng.normal(size=(40, D))
    ytr = np.clip(np.expm1(3.5 + 0.6 * Xtr @ W / np.sqrt(D) + rng.normal(0, 0.3, 40)), 1, 500)
    est = RLSRegressor(1.0).fit(Xtr, ytr)
    arr = np.cumsum(rng.exponential(0.05, n))
    reqs = [ServeRequest(f"r{i}", f"p{i}", [1] * 20, lengths[f"p{i}"], float(arr[i]), 0.0) for i in range(n)]
    return rows, est, reqs


PROF = HardwareProfile("t", t_base=0.002, t_seq=0.0005, t_ctx=0.0, t_prefill_token=1e-5, t_swap_token=0.0,
                       max_batch=3, token_budget=4096, kv_blocks=100_000, block_size=16)


@pytest.mark.parametrize("updates", ["thread", "between_steps"])
def test_stored_rows_predict_at_arrival_and_updates_equal_sequential_rls(updates):
    rows, est, reqs = _setup()
    pred = OnlineReadout(lambda r: rows[r.prompt_id], est, live=False, updates=updates)
    clock = VirtualClock()
    run = replay(reqs, FakeEngine(PROF, clock), get_policy("sjf"), pred, clock)
    stats = pred.stats()
    pred.close()
    r = run.requests
    assert (r["ready"] == r["arrival"]).all()  # stored rows: no wait
    # the first prediction is the warm start's; each later one from weights that saw some completions
    assert r.iloc[0]["prediction"] == pytest.approx(float(est.predict(rows["p0"][None])[0]))
    assert (r["priority"] == np.round(r["prediction"]).astype(int)).all()
    assert stats["n_updates"] == len(reqs) and stats["updates_pending"] == 0
    # the service applied completions in finish order: the same as updating by hand in that order
    ref = copy.deepcopy(est)
    for rid in r.sort_values("finish", kind="stable")["rid"]:
        q = r.set_index("rid").loc[rid]
        ref.partial_fit(rows[q["prompt_id"]][None], np.array([q["output_tokens"]], dtype=float))
    np.testing.assert_allclose(pred._timed.theta_, ref.theta_, rtol=1e-10, atol=1e-12)
    assert not np.allclose(ref.theta_, est.theta_)  # the warm start itself was not changed (copied)


def test_between_steps_an_update_is_applied_before_on_complete_returns():
    rows, est, reqs = _setup(n=4)
    pred = OnlineReadout(lambda r: rows[r.prompt_id], est, live=False, updates="between_steps")
    before = pred.service.predict_now(rows["p1"])
    pred.submit(reqs[0], 0.0)
    pred.poll(0.0)
    pred.on_complete(reqs[0], 500, 1.0)  # no drain: the caller's thread applied it
    assert pred.service.predict_now(rows["p1"]) != before and pred._timed.n == 1
    assert pred.service.pending_updates == 0
    pred.close()
    with pytest.raises(ConfigError, match="serve.predictor.updates='later'; valid: between_steps, thread"):
        OnlineReadout(lambda r: rows[r.prompt_id], est, live=False, updates="later")


def test_live_predictions_wait_on_a_worker_and_the_wait_is_counted():
    rows, est, reqs = _setup(n=10)

    def slow(r):
        time.sleep(0.03)  # a prefill that takes 30 ms
        return rows[r.prompt_id]

    pred = OnlineReadout(slow, est, live=True)
    clock = WallClock()
    run = replay(reqs, FakeEngine(PROF, clock), get_policy("sjf"), pred, clock)
    stats = pred.stats()
    pred.close()
    r = run.requests
    wait = r["ready"] - r["arrival"]
    assert (wait >= 0.029).all()  # nobody entered before its prediction existed
    assert (r["added"] >= r["ready"] - 1e-9).all() and (r["first_token"] > r["added"]).all()
    assert stats["predict_compute_mean"] >= 0.029 and stats["n_updates"] == len(reqs)
    assert stats["update_throughput"] > 0


def test_stored_predictions_need_every_prompt():
    reqs = [ServeRequest("r0", "unknown", [1], 2, 0.0, 2.0)]
    clock = VirtualClock()
    with pytest.raises(DataError, match="no stored prediction for prompt unknown"):
        replay(reqs, FakeEngine(PROF, clock), get_policy("sjf"), TablePredictor({"p0": 1.0}, "h"), clock)


@pytest.mark.numeric
def test_prefill_featurizer_is_the_layers_last_token_state(tiny_model, one_torch_thread, tmp_path):
    ids = [5, 17, 42, 8, 99, 3]
    with torch.no_grad():
        hs = tiny_model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    n = tiny_model.config.num_hidden_layers
    for layer in (0, 2, n):
        got = PrefillFeaturizer(tiny_model, layer, threads=None)(ids)
        want = hs[layer][0, -1].double().numpy()  # HF's last entry is after the final norm, as ours
        # two float32 forwards (hooks vs output_hidden_states): the widest reduction is the MLP's
        assert_close_f32(got, want, tiny_model.config.intermediate_size, both_float32=True, err_msg=f"layer {layer}")
    f = PrefillFeaturizer(tiny_model, 2, threads=None)
    a = cached_rows(f, ["x", "y"], [ids, ids[:3]], tmp_path / "rows.npz")
    b = cached_rows(f, ["y", "x"], [ids[:3], ids], tmp_path / "rows.npz")  # read back from the file
    np.testing.assert_array_equal(a["x"], b["x"])
    assert list(b) == ["y", "x"]
