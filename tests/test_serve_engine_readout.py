"""The readout from the engine's own prefill (LEAP), without vLLM: the hook finds each wanted request's
last prompt token in a step's flat batch and copies the residual stream there (small torch modules and the
tiny random Llama); requests are served prefill first and the fake engine's two-phase replay equals the
simulator's `prefill_first` model; the readout predicts from the captured row and learns from completions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lengthpred.errors import ConfigError, ModelError
from lengthpred.models.tiny import TINY_LAYERS, build_tiny_llama
from lengthpred.online.rls import RLSRegressor
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.policies import make_policy
from lengthpred.sched.core.simulator import simulate
from lengthpred.sched.core.workload import Workload
from lengthpred.serve import FakeEngine, ServeRequest, VirtualClock, get_policy, replay
from lengthpred.serve.engine_readout import StateCapture, StepLayout, decoder_layer, last_prompt_rows
from lengthpred.serve.fake import fake_state
from lengthpred.serve.featurize import PrefillFeaturizer
from lengthpred.serve.fidelity import errors, sim_metrics, simulate_run
from lengthpred.serve.metrics import SLO, real_run_metrics
from lengthpred.serve.predictor import EngineReadout
from lengthpred.serve.replay import PREFILL_SUFFIX, keep_slots
from tests.test_serve import assert_simulator_equals

PROF = HardwareProfile("test", t_base=0.01, t_seq=0.002, t_ctx=1e-5, t_prefill_token=1e-4, t_swap_token=0.0,
                       max_batch=3, token_budget=4096, kv_blocks=100_000, block_size=16)


def test_last_prompt_rows_skip_decodes_and_unfinished_chunks():
    # a decode (1 token at position 30), a whole 5-token prompt, the first 4-token chunk of a 10-token prompt,
    # the last 6-token chunk of that prompt in another request, and one nobody asked for
    lay = StepLayout(["dec", "full", "chunk1", "chunk2", "other"], np.array([0, 1, 6, 10, 16, 19]),
                     np.array([30, 0, 0, 4, 0]), np.array([20, 5, 10, 10, 3]))
    rows = last_prompt_rows(lay, {"dec", "full", "chunk1", "chunk2"})
    assert rows == {"full": 5, "chunk2": 15}  # row start + (prompt − 1 − computed before the step)


class _VllmLikeLayer(torch.nn.Module):
    """Returns (hidden, residual) as vLLM's decoder layers do; the stream is their sum."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return 2 * x, residual + 1


def test_capture_sums_hidden_and_residual_at_the_wanted_rows_and_copies_them():
    layer = _VllmLikeLayer()
    lay = StepLayout(["e-a", "e-b", "e-c"], np.array([0, 1, 4, 6]), np.array([7, 0, 0]), np.array([7, 3, 2]))
    cap = StateCapture(layer, lambda: lay)
    cap.want("e-b", "b")
    cap.want("e-c", "c")
    x, res = torch.randn(6, 8), torch.randn(6, 8)
    h, r = layer(x, res)
    r.zero_()  # what the next layer's fused add-norm does in place: the captured rows must be copies
    rows = cap.take()
    assert set(rows) == {"b", "c"} and cap.wanted == {}
    np.testing.assert_allclose(rows["b"], (2 * x[3] + res[3] + 1).double().numpy(), atol=1e-6)
    np.testing.assert_allclose(rows["c"], (2 * x[5] + res[5] + 1).double().numpy(), atol=1e-6)
    layer(x, res)
    assert cap.take() == {}  # captured once; a later step reads nothing
    assert cap.n_captured == 2 and cap.hook_s > 0


def test_capture_on_the_tiny_llama_equals_the_prefill_featurizer():
    """The hook on decoder layer L − 1 reads hidden_states[L], the feature the readout was trained on."""
    model = build_tiny_llama(vocab_size=200)
    ids = [1, 17, 42, 99, 5, 63, 150, 7]
    layer = 2
    f = PrefillFeaturizer(model, layer, threads=None)
    cap = StateCapture(decoder_layer(f.model.get_decoder().layers, layer),
                       lambda: StepLayout(["e"], np.array([0, len(ids)]), np.array([0]), np.array([len(ids)])))
    cap.want("e", "req")
    with torch.no_grad():
        model.get_decoder()(input_ids=torch.tensor([ids]), use_cache=False)
    np.testing.assert_allclose(cap.take()["req"], f(ids), rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="after a decoder layer"):
        decoder_layer(f.model.get_decoder().layers, TINY_LAYERS)


def _readout(seed: int = 0) -> RLSRegressor:
    rng = np.random.default_rng(seed)
    X = np.stack([fake_state(list(rng.integers(0, 50, int(k)))) for k in rng.integers(10, 300, 40)])
    y = 20 + 150 * X[:, 1] + 30 * X[:, 2] + rng.normal(0, 5, 40)
    return RLSRegressor(1.0).fit(X, y)


def _requests(n: int, seed: int = 0, gap: float = 0.15) -> list[ServeRequest]:
    rng = np.random.default_rng(seed)
    L, P = rng.integers(1, 120, n), rng.integers(10, 300, n)
    arr = np.cumsum(rng.exponential(gap, n))
    return [ServeRequest(f"r{i}", f"p{i}", [int(x) for x in rng.integers(0, 50, int(P[i]))], int(L[i]), float(arr[i]),
                         float(L[i])) for i in range(n)]


def _engine_run(reqs):
    clock = VirtualClock(start=7.0)
    eng = FakeEngine(PROF, clock)
    pred = EngineReadout(_readout())
    try:
        run = replay(reqs, eng, get_policy("sjf"), pred, clock)
        stats = pred.stats()
    finally:
        pred.close()
    return run, stats


def test_engine_readout_serves_prefill_first_and_the_simulator_models_it_exactly():
    reqs = _requests(50)
    run, stats = _engine_run(reqs)
    r = run.requests.set_index("rid")
    assert (r["status"] == "finished").all() and (r["output_tokens"] == r["target_tokens"]).all()
    assert r["prefill_first"].all()
    assert run.steps["n_waiting"].max() > 0  # decodes did wait for a slot, so the order mattered
    # the prediction exists when the prefill step returns, which is also the first token
    np.testing.assert_allclose(r["ready"], r["first_token"], atol=1e-12)
    assert (r["priority"] == np.round(r["prediction"]).astype(int)).all()
    assert stats["n_updates"] == len(reqs) and stats["predict_compute_mean"] > 0
    # a decode the priority order admits at once keeps its slot; one that yields re-prefills only the prompt's
    # last partial block (+ its first token) when it is admitted again
    split = r["split"].to_numpy()
    assert 0 < split.sum() < sum(q.length > 1 for q in reqs)
    tails = sum(q.prompt_tokens + 1 - PROF.block_size * (q.prompt_tokens // PROF.block_size)
                for q in reqs if r.loc[q.rid, "split"])
    assert run.steps["prefill_tokens"].sum() == tails + sum(q.prompt_tokens for q in reqs)
    assert_simulator_equals(run, "sjf", PROF)


def test_prefills_go_ahead_of_waiting_decodes_by_arrival():
    """One slot: a decode waiting at a short prediction still lets every later arrival's prefill go first."""
    prof = HardwareProfile("one", t_base=0.01, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                           max_batch=1, token_budget=4096, kv_blocks=100_000, block_size=16)
    wl = Workload(np.zeros(3), np.array([20, 20, 20]), np.array([5, 3, 4]))
    res = simulate(wl, prof, make_policy("sjf"), np.array([5.0, 3.0, 4.0]), prefill_first=True, horizon=math.inf)
    # prefills at steps 1, 2, 3 (first tokens), then decodes shortest first: 1 (2 left), 2 (3 left), 0 (4 left)
    np.testing.assert_allclose(res.first_token, [0.01, 0.02, 0.03])
    np.testing.assert_allclose(res.finish, [0.12, 0.05, 0.08])
    plain = simulate(wl, prof, make_policy("sjf"), np.array([5.0, 3.0, 4.0]), horizon=math.inf)
    # predictions known at arrival (a worker's, or stored): the same order without the prefill-only steps
    np.testing.assert_allclose(plain.finish, [0.12, 0.03, 0.07])
    with pytest.raises(ConfigError, match="non-preemptive"):
        simulate(wl, prof, make_policy("srpt"), np.array([5.0, 3.0, 4.0]), prefill_first=True, horizon=math.inf)


def test_a_one_token_answer_ends_with_its_prefill():
    reqs = [ServeRequest("a", "pa", list(range(40)), 1, 0.0, 1.0), ServeRequest("b", "pb", list(range(30)), 4, 0.0, 4.0)]
    run, stats = _engine_run(reqs)
    r = run.requests.set_index("rid")
    assert r.loc["a", "finish"] == r.loc["a", "first_token"] and r.loc["a", "output_tokens"] == 1
    assert r.loc["b", "output_tokens"] == 4 and stats["n_updates"] == 2
    assert_simulator_equals(run, "sjf", PROF)


def test_the_fake_engine_reuses_cached_full_blocks_only_within_a_salt():
    clock = VirtualClock()
    eng = FakeEngine(PROF, clock)
    prompt = list(range(40))
    eng.add("x" + PREFILL_SUFFIX, prompt, 1, -1, 0.0, capture=True, cache_salt="x")
    info = eng.step()
    assert info.prefill_tokens == 40 and set(info.captured) == {"x" + PREFILL_SUFFIX}
    np.testing.assert_allclose(info.captured["x" + PREFILL_SUFFIX], fake_state(prompt))
    eng.add("x", prompt + [0], 3, 0, 0.0, cache_salt="x")
    eng.add("y", prompt + [0], 3, 0, 0.0, cache_salt="y")
    assert eng.step().prefill_tokens == (41 - 32) + 41  # x: two cached blocks of 16; y: another salt, nothing


def test_keep_slots_follows_the_engines_priority_order():
    waiting = [(-1, 5.0), (40, 1.0)]  # a prefill that arrived at 5 s, a decode predicted at 40 tokens
    cands = [(10, 2.0, "x"), (40, 0.5, "y"), (90, 0.1, "z")]
    assert keep_slots(cands, waiting, 2) == {"x"}  # the prefill first, then x
    assert keep_slots(cands, waiting, 3) == {"x", "y"}  # y ties the waiting decode and arrived earlier
    assert keep_slots(cands, [], 3) == {"x", "y", "z"} and keep_slots(cands, waiting, 0) == set()


def test_a_prefill_whose_state_was_not_captured_stops_the_run():
    class Blind(FakeEngine):
        def step(self):
            info = super().step()
            info.captured = {}
            return info

    clock = VirtualClock()
    pred = EngineReadout(_readout())
    with pytest.raises(ModelError, match="captured no state"):
        replay(_requests(3), Blind(PROF, clock), get_policy("sjf"), pred, clock)
    pred.close()


def test_fcfs_prefill_first_serves_in_two_phases_without_a_prediction_and_the_simulator_models_it():
    """The baseline that separates the serving order from the predictions: the same two phases as the engine
    readout, decodes by arrival; its TTFT falls against plain FCFS on the same requests (prefills skip the
    queue), and the simulator replays it exactly."""
    from lengthpred.serve import NoPredictor

    reqs = _requests(50)
    runs = {}
    for name in ("fcfs", "fcfs-pf"):
        clock = VirtualClock(start=7.0)
        runs[name] = replay(reqs, FakeEngine(PROF, clock), get_policy(name), NoPredictor(), clock)
    r = runs["fcfs-pf"].requests.set_index("rid")
    assert (r["status"] == "finished").all() and (r["output_tokens"] == r["target_tokens"]).all()
    assert r["prefill_first"].all() and not runs["fcfs"].requests["prefill_first"].any()
    assert (r["priority"] == 0).all() and r["prediction"].isna().all()
    np.testing.assert_allclose(r["ready"], r["arrival"])
    assert 0 < r["split"].sum()  # some decodes yielded their slot to an earlier arrival's decode
    ttft = {k: float((v.requests["first_token"] - v.requests["arrival"]).mean()) for k, v in runs.items()}
    assert ttft["fcfs-pf"] < 0.8 * ttft["fcfs"]
    assert get_policy("fcfs-pf").sim_policy == "fcfs-prefill-first" and get_policy("fcfs-pf").sim_make == "fcfs"
    assert_simulator_equals(runs["fcfs-pf"], "fcfs-pf", PROF)
    assert_simulator_equals(runs["fcfs"], "fcfs", PROF)


def test_aging_with_the_engine_readout_is_served_and_simulated_alike():
    """An aging policy on the readout from the engine's own prefill: decodes compete for slots at their aged
    priorities, prefills stay ahead of every decode however old, and the simulator's `prefill_first` replay
    with aging matches the fake engine's run on the means to 2% (its predictions fixed: no RLS updates, so every
    run is the same). Not request by request: the engine's aged
    priorities are whole numbers, so decodes whose keys round alike go by arrival, where the simulator compares
    the exact keys, and a decode that finishes at another time moves later prefills' first tokens too (without
    aging the replay is exact: the tests above)."""
    reqs = _requests(60, seed=3, gap=0.08)
    runs = {}
    for name in ("sjf", "sjf-aging"):
        clock = VirtualClock(start=7.0)
        pred = EngineReadout(_readout())
        pred.service.submit_update = lambda x, y: None  # no background RLS updates: the same predictions every run
        try:
            runs[name] = replay(reqs, FakeEngine(PROF, clock), get_policy(name, aging_weight=3000.0), pred, clock)
        finally:
            pred.close()
    aged = runs["sjf-aging"].requests.set_index("rid")
    assert (aged["status"] == "finished").all() and aged["prefill_first"].all() and aged["split"].any()
    order = {k: v.requests.sort_values("finish")["rid"].tolist() for k, v in runs.items()}
    assert order["sjf"] != order["sjf-aging"]  # aging changed who went first
    wait = {k: float((v.requests["finish"] - v.requests["arrival"]).max()) for k, v in runs.items()}
    assert wait["sjf-aging"] < wait["sjf"]  # and shortened the longest request
    sim = simulate_run(runs["sjf-aging"].requests, get_policy("sjf-aging", 3000.0), PROF)
    real = real_run_metrics(runs["sjf-aging"].requests, runs["sjf-aging"].steps, runs["sjf-aging"].end, SLO())
    err = {e["metric"]: abs(e["signed_err"]) for e in errors(real, sim_metrics(sim, SLO()))}
    for m in ("per_token_latency_mean", "ttft_mean", "jct_mean", "tpot_mean"):
        assert err[m] < 0.02, (m, err[m])


def test_the_replay_loop_runs_numpys_blas_on_one_thread():
    """An RLS update in the loop must not wake BLAS worker threads that spin beside the engine's step."""
    from threadpoolctl import threadpool_info, threadpool_limits

    seen: list[int] = []

    class Probe(EngineReadout):
        def on_complete(self, req, length, now):
            seen.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
            super().on_complete(req, length, now)

    clock = VirtualClock(start=7.0)
    pred = Probe(_readout())
    try:
        with threadpool_limits(limits=2, user_api="blas"):
            replay(_requests(6), FakeEngine(PROF, clock), get_policy("sjf"), pred, clock)
            after = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    finally:
        pred.close()
    assert seen and set(seen) == {1}
    assert set(after) == {2}  # the caller's setting is back after the run
