"""Issue 26 on the serving path: a distributional head's keys (its expected length, TIE's E + β·CVaR) read
off the row the engine captured in the request's own prefill (`DistEngineReadout`), served prefill first on
the fake engine and replayed exactly by the simulator; TIE's key and β; bad settings refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.distributions import LogNormal, tail_mean, tie_beta, tie_key
from lengthpred.errors import ConfigError, DataError
from lengthpred.heads.distributional import CensoredLogNormalHead
from lengthpred.serve import FakeEngine, ServeRequest, VirtualClock, get_policy, replay
from lengthpred.serve.fake import fake_state
from lengthpred.serve.predictor import DistEngineReadout
from lengthpred.serve.priority import by_sim_policy
from lengthpred.stages import serve as setup
from tests.test_serve import assert_simulator_equals
from tests.test_serve_engine_readout import PROF, _requests

from .conftest import compose_cfg


def test_tie_beta_follows_the_queue_and_is_clipped():
    assert tie_beta(0, 4) == 0.1 and tie_beta(4, 4) == 0.1 and tie_beta(8, 4) == pytest.approx(0.2)
    assert tie_beta(1000, 4) == 0.5
    with pytest.raises(ConfigError, match="max_batch"):
        tie_beta(3, 0)


def test_tie_key_adds_the_capped_tail_and_can_reorder_two_requests():
    # a narrow long request and a wide shorter one: the mean puts the wide one first, β = 0.5 the narrow one
    d = LogNormal(np.log1p([150.0, 60.0]), np.array([0.05, 1.0]))
    cap = 512.0
    mean, tail = d.mean(cap=cap), tail_mean(d, cap)
    assert (tail >= d.quantile([0.9]).ravel().clip(max=cap) - 1e-9).all() and (tail <= cap).all()
    np.testing.assert_allclose(tie_key(d, cap, 0.5), mean + 0.5 * tail)
    np.testing.assert_allclose(tie_key(d, cap, 0.0), mean)
    assert np.argsort(tie_key(d, cap, 0.0)).tolist() != np.argsort(tie_key(d, cap, 0.5)).tolist()
    with pytest.raises(ConfigError, match="beta"):
        tie_key(d, cap, -1.0)


def _head(seed: int = 0) -> CensoredLogNormalHead:
    rng = np.random.default_rng(seed)
    X = np.stack([fake_state(list(rng.integers(0, 50, int(k)))) for k in rng.integers(10, 300, 60)])
    mu = 3.0 + 2.0 * X[:, 1]
    L = np.expm1(mu + rng.normal(0, 0.3 + 0.5 * X[:, 2], 60))
    return CensoredLogNormalHead(scale="linear").fit(X, np.minimum(L, 200.0), censored=L >= 200.0)


@pytest.mark.parametrize("policy,beta", [("sjf-dist", 0.0), ("sjf-tie", 0.5)])
def test_a_distributional_key_serves_prefill_first_and_the_simulator_replays_it(policy, beta):
    head = _head()
    cap = head.cap_

    def key(x):
        return float(tie_key(head.predict_dist(x), cap, beta)[0])

    reqs: list[ServeRequest] = _requests(40)
    clock = VirtualClock(start=3.0)
    pred = DistEngineReadout(key, name=f"k{beta}")
    run = replay(reqs, FakeEngine(PROF, clock), get_policy(policy), pred, clock)
    r = run.requests.set_index("rid")
    assert (r["status"] == "finished").all() and r["prefill_first"].all()
    want = [key(fake_state(q.prompt_ids)[None, :]) for q in reqs]
    np.testing.assert_allclose(r.loc[[q.rid for q in reqs], "prediction"], want, rtol=1e-12)
    assert (r["priority"] == np.round(r["prediction"]).astype(int)).all()
    assert run.steps["n_waiting"].max() > 0
    assert pred.stats()["predict_compute_mean"] > 0
    assert by_sim_policy(policy).name == policy and get_policy(policy).sim_make == "sjf"
    assert_simulator_equals(run, policy, PROF)


def test_a_non_finite_key_stops_the_run_in_one_line():
    pred = DistEngineReadout(lambda x: float("nan"), name="bad")
    with pytest.raises(DataError, match="non-finite key"):
        pred.predict_row(_requests(1)[0], np.zeros(4))


class _RowsByLength:
    """A stand-in featurizer: a prompt's row from its token count (what `dist_keys` reads through `cached`)."""

    def cached(self, ids, tokens):
        return {i: np.array([np.log1p(len(t)), np.sin(len(t)), 1.0 + (len(t) % 7) / 7]) for i, t in
                zip(ids, tokens, strict=True)}


@pytest.mark.integration
@pytest.mark.datasets
def test_dist_keys_fit_on_every_demo_sample_and_tie_adds_its_weighted_tail(demo_splits_dir):
    from hydra.utils import instantiate

    from lengthpred.data import load_prompts, load_splits
    from lengthpred.models import load_tokenizer
    from lengthpred.stages.targets import load_targets

    cfg = compose_cfg([f"data.out_dir={demo_splits_dir}", "serve.policies=[sjf-dist,sjf-tie]"])
    prompts, splits = load_prompts(cfg.data), load_splits(cfg.data)
    targets = load_targets(cfg, prompts=prompts)
    tok = load_tokenizer(instantiate(cfg.model))
    keys = setup.dist_keys(cfg, _RowsByLength(), prompts, splits, targets, tok)
    assert keys["sjf-dist"][0] == "censored_hetero:mean+engine" and keys["sjf-tie"][0] == "censored_hetero:tie0.5+engine"
    rows = np.array([[np.log1p(n), np.sin(n), 1.0 + (n % 7) / 7] for n in (30, 120, 400, 900)])
    mean = np.array([keys["sjf-dist"][1](r[None, :]) for r in rows])
    tie = np.array([keys["sjf-tie"][1](r[None, :]) for r in rows])
    assert ((mean > 0) & (mean <= 512)).all() and (tie > mean).all() and (tie - mean <= 0.5 * 512 + 1e-9).all()
    cfg.serve.predictor.dist.beta = 0.0
    keys0 = setup.dist_keys(cfg, _RowsByLength(), prompts, splits, targets, tok)
    np.testing.assert_allclose([keys0["sjf-tie"][1](r[None, :]) for r in rows], mean)


@pytest.mark.parametrize("overrides,match", [
    (["serve.policies=[sjf-dist,sjf-tie]", "serve.predictor.source=worker"], "source=engine"),
    (["serve.policies=[sjf-tie]", "serve.predictor.kind=stored"], "kind=rls"),
    (["serve.policies=[sjf-tie]", "serve.predictor.dist.beta=-1"], "finite number >= 0"),
    (["serve.policies=[sjf-tie]", "serve.predictor.dist.scale=wide"], "valid: shared, linear"),
    (["serve.policies=[sjf-tie]", "serve.predictor.dist.beta=high"], "finite number >= 0"),
])
def test_bad_distributional_serving_settings_fail_in_one_line(overrides, match):
    with pytest.raises(ConfigError, match=match) as e:
        setup.settings_from_cfg(compose_cfg(overrides))
    assert "\n" not in str(e.value)


def test_starvation_replays_the_point_readouts_predictions_never_another_key():
    import pandas as pd

    from lengthpred.serve.starvation import compare

    rng = np.random.default_rng(1)
    n = 30
    base = pd.DataFrame({"load": 0.9, "seed": 0, "rid": [f"r-{k}" for k in range(n)], "status": "finished",
                         "arrival": np.sort(rng.uniform(0, 3, n)), "prompt_tokens": rng.integers(10, 200, n),
                         "target_tokens": rng.integers(1, 120, n)})
    point = rng.uniform(1, 120, n)
    frames = [base.assign(policy="fcfs", predictor="none", prediction=np.nan),
              base.assign(policy="sjf-tie", predictor="k:tie", prediction=1000 - point),  # another key, reversed
              base.assign(policy="sjf", predictor="rls", prediction=point)]
    pols = [("sjf", "sjf", {})]
    mixed = compare(pd.concat(frames, ignore_index=True), PROF, pols)
    alone = compare(pd.concat([frames[0], frames[2]], ignore_index=True), PROF, pols)
    pd.testing.assert_frame_equal(mixed, alone)
    assert compare(pd.concat(frames[:2], ignore_index=True), PROF, pols).empty  # no point readout: no SJF row
    # runs without FCFS (aging against SJF) replay the same workload from another policy's copy
    without_fcfs = compare(pd.concat(frames[1:], ignore_index=True), PROF, pols)
    pd.testing.assert_frame_equal(without_fcfs, alone)
