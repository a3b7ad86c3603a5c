"""Issue 26, the rest of the toolkit: distributional heads through train.py's path (fitted on every sampled
length, a capped one censored; quantile columns in the predictions), TIE's key with its queue rule in the
simulator, and the censored online readout on T3's own streams."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.eval.dist_report import t3_adapt_markdown
from lengthpred.heads.base import HeadInput, LabeledSet
from lengthpred.heads.distributional import CensoredLogNormalHead
from lengthpred.heads.search import subset
from lengthpred.heads.settings import HeadSettings
from lengthpred.heads.training import QUANTILE_COLUMNS, fit_head, run_training
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.policies import make_policy
from lengthpred.sched.core.predictors import QueueTIEPredictor
from lengthpred.sched.core.simulator import simulate
from lengthpred.sched.core.workload import Workload
from lengthpred.sched.sweep.pool import LengthSource

from .conftest import compose_cfg


def labeled(n: int, seed: int, cap: float = 200.0) -> LabeledSet:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    mu = 4.0 + X[:, 0] - 0.5 * X[:, 1]
    L = np.floor(np.expm1(mu[:, None] + 0.5 * rng.normal(size=(n, 3))))
    capped = L >= cap
    L = np.minimum(L, cap)
    ids = [f"p{seed}_{i}" for i in range(n)]
    inputs = HeadInput(ids=ids, features=X, domains=["d"] * n)
    return LabeledSet(inputs, L.mean(axis=1), n_samples=np.full(n, 3), capped_frac=capped.mean(axis=1),
                      sample_lengths=list(L), sample_capped=list(capped))


def test_a_sample_head_is_fitted_on_every_sample_and_a_point_head_on_the_target():
    data = labeled(120, 0)
    head = fit_head(CensoredLogNormalHead(alpha=1.0), data.inputs.features, data)
    rows, y, c = data.long()
    direct = CensoredLogNormalHead(alpha=1.0).fit(data.inputs.features[rows], y, censored=c)
    np.testing.assert_allclose(head.coef_, direct.coef_)
    assert c.any() and len(y) == 360
    from lengthpred.heads.linear import LinearHead

    lin = fit_head(LinearHead(alpha=1.0), data.inputs.features, data)
    np.testing.assert_allclose(lin.predict(data.inputs.features[:3]),
                               LinearHead(alpha=1.0).fit(data.inputs.features, data.y).predict(data.inputs.features[:3]))
    part = subset(data, [3, 1])
    assert [list(v) for v in part.sample_lengths] == [list(data.sample_lengths[3]), list(data.sample_lengths[1])]
    bare = LabeledSet(data.inputs, data.y)
    with pytest.raises(DataError, match="no per-sample lengths"):
        bare.long()


@pytest.mark.parametrize("head", ["censored_lognormal", "quantile_linear"])
def test_train_path_fits_a_distributional_head_on_samples_and_writes_its_quantiles(head):
    train, val, test = labeled(150, 1), labeled(50, 2), labeled(60, 3)
    cfg = HeadSettings(select={"alpha": [1.0, 100.0]}, layer=0, pooling="last")
    fitted, metrics, frame = run_training(head, cfg, train, val, test)
    assert metrics["censoring"].startswith("every sampled length a row")
    q = frame[list(QUANTILE_COLUMNS.values())].to_numpy()
    assert np.isfinite(q).all() and (np.diff(q, axis=1) >= 0).all() and (q[:, 0] < q[:, 2]).mean() > 0.9
    assert metrics["spearman"] > 0.5 and metrics["n_candidates"] == 2
    _, _, point = run_training("linear", HeadSettings(select={"alpha": [1.0]}), train, val, test)
    assert not set(QUANTILE_COLUMNS.values()) & set(point.columns)


def test_tie_queue_key_takes_beta_from_the_waiting_queue_when_a_request_arrives():
    """Ten requests at once on a one-slot server: the k-th waits behind k − 1 others, so β = 0.1·k clipped to
    [0.1, 0.5]; the key orders service, and a wide tail can put a longer expected request later."""
    prof = HardwareProfile("one", t_base=0.01, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                           max_batch=1, token_budget=4096, kv_blocks=100_000, block_size=16)
    n = 10
    mean = np.linspace(100, 10, n)
    tail = np.zeros(n)
    tail[-1] = 1000.0  # the shortest expected request has a huge tail: late in the queue, β = 0.5 pushes it last
    wl = Workload(np.zeros(n), np.full(n, 8), np.full(n, 5))
    pred = QueueTIEPredictor(mean, tail)
    res = simulate(wl, prof, make_policy("sjf"), pred)
    assert pred.betas == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    order = np.argsort(res.first_token, kind="stable")
    assert order[-1] == n - 1  # 10 + 0.5·1000 = 510: last
    with pytest.raises(DataError, match="no queue bound"):
        QueueTIEPredictor(mean, tail).predict(0, 0.0)
    with pytest.raises(DataError, match="tail"):
        LengthSource("s", np.ones(3), np.ones(3), preds={"a": np.ones(3)}, tails={"b": np.ones(3)})


def test_uncertainty_schedulers_include_tie_with_the_queue_rule():
    from lengthpred.distributions import LogNormal
    from lengthpred.eval.dist_sched import queue_tie_keys, run_uncertainty_sched, uncertainty_keys

    rng = np.random.default_rng(0)
    n = 60
    d = LogNormal(rng.normal(4.5, 0.6, n), rng.uniform(0.2, 1.0, n))
    samples = [list(np.minimum(np.floor(np.expm1(d.mu[i] + d.sigma[i] * rng.normal(size=3))) + 1, 512).astype(int))
               for i in range(n)]
    keys = {"linear": d.mean(cap=512.0)} | uncertainty_keys("h", d, 512.0)
    k, tails = queue_tie_keys("h", d, 512.0)
    summary, gains = run_uncertainty_sched(samples, np.full(n, 50.0), keys | k, hardware="cpu-smollm2-135m",
                                           loads=[0.95], seeds=[0, 1], n_requests=200, lower_bounds=["linear"],
                                           tails=tails)
    assert "h:tie-queue" in set(summary["predictor"])
    own = gains[(gains["metric"] == "gain_vs_own_mean") & (gains["predictor"] == "h:tie-queue")]
    assert len(own) == 1 and np.isfinite(own["value"].astype(float)).all()
    from lengthpred.sched.sweep.experiment import _predictor

    src = LengthSource("s", np.full(n, 50.0), np.full(n, 50.0), preds=keys | k, tails=tails)
    req = src.draw(5, np.random.default_rng(0))
    built = _predictor(src, "h:tie-queue", req)
    assert isinstance(built, QueueTIEPredictor)
    np.testing.assert_allclose(built.tail, tails["h:tie-queue"][req.idx])


def test_t3_markdown_pairs_models_per_target_with_intervals_over_prompts():
    rows = []
    for t in ("a", "b"):
        for pair in (f"x->{t}", f"y->{t}"):
            for seed in (0, 1):
                for n in (0, 40, 80):
                    for m, base in (("static", 80.0), ("censored_rls", 80.0 - n / 8), ("rls_cap_as_value", 80.0 - n / 16)):
                        rows.append({"labels": n, "model": m, "crps": base, "pair": pair, "target": t, "seed": seed,
                                     "prompt": ""})
                for j in range(20):
                    for m, v in (("static", 80.0), ("censored_rls", 70.0 + j % 2), ("rls_cap_as_value", 75.0)):
                        rows.append({"labels": -1, "model": m, "crps": v, "pair": pair, "target": t, "seed": seed,
                                     "prompt": f"{t}{j}"})
    md = t3_adapt_markdown(pd.DataFrame(rows), n_boot=200)
    assert "4 pairs × 2 stream seeds" in md and "| 80 |" in md
    last = [ln for ln in md.splitlines() if ln.startswith("| all |")][0]
    assert "censored_rls − static" in md and "-9.5 [" in last  # 70 + mean(j % 2) − 80


@pytest.mark.integration
@pytest.mark.datasets
def test_censored_readout_streams_t3s_pairs_on_the_demo_trace(demo_splits_dir):
    from lengthpred.data import load_prompts, load_splits
    from lengthpred.heads.assemble import indomain_ids
    from lengthpred.stages.dist import adaptation_on_t3_streams, feature_matrix
    from lengthpred.stages.locations import reference_path
    from lengthpred.targets import read_reference

    cfg = compose_cfg([f"data.out_dir={demo_splits_dir}", "distribution.features=trace", "online.stream_seeds=2",
                       "online.pairs=['math->chat','code->chat']"])
    rows, meta = read_reference(reference_path(cfg))
    prompts = load_prompts(cfg.data)
    ids = [i for part in indomain_ids(load_splits(cfg.data)).values() for i in part]
    X, _ = feature_matrix(cfg, prompts, rows, ids)
    from lengthpred.distributions import from_trace

    curves = adaptation_on_t3_streams(cfg, dict(zip(ids, X, strict=True)), lambda i: from_trace(rows, meta, i),
                                      every=40, forgetting=1.0,
                                      log=lambda _: None)
    assert set(curves["pair"]) == {"math->chat", "code->chat"} and set(curves["seed"]) == {0, 1}
    final = curves[curves["labels"] < 0]
    assert set(final["model"]) == {"static", "censored_rls", "rls_cap_as_value"}
    assert final["prompt"].str.len().min() > 0 and np.isfinite(final["crps"]).all()
    # every stream starts from its pair's static fit; a pair's static fit and test set do not depend on the seed
    run = curves[curves["labels"] >= 0].set_index(["pair", "seed", "labels", "model"])["crps"]
    for (pair, seed), g in run.groupby(level=["pair", "seed"]):
        assert g.loc[pair, seed, 0, "censored_rls"] == pytest.approx(g.loc[pair, seed, 0, "static"])
        assert g.loc[pair, seed, 0, "static"] == pytest.approx(run.loc[pair, 0, 0, "static"])
    last = run.groupby(level=["pair", "seed", "model"]).last().unstack("model")
    assert (last["censored_rls"] != last["static"]).all()  # the updates moved it
    assert "chat" in t3_adapt_markdown(curves, n_boot=50)


def test_loads_are_chosen_by_the_oracles_headroom_on_other_seeds_and_every_key_sits_beside_it():
    from lengthpred.distributions import LogNormal
    from lengthpred.eval.dist_sched import (
        choose_loads,
        headroom_sweep,
        nulls_markdown,
        run_uncertainty_sched,
        uncertainty_keys,
    )

    rng = np.random.default_rng(1)
    n = 60
    d = LogNormal(rng.normal(4.5, 0.6, n), rng.uniform(0.2, 1.0, n))
    samples = [list(np.minimum(np.floor(np.expm1(d.mu[i] + d.sigma[i] * rng.normal(size=3))) + 1, 512).astype(int))
               for i in range(n)]
    point = d.mean(cap=512.0)
    sweep = headroom_sweep(samples, np.full(n, 50.0), point, hardware="cpu-smollm2-135m-vllm", loads=[0.5, 0.95],
                           seeds=[10, 11], n_requests=150)
    assert list(sweep["load"]) == [0.5, 0.95] and np.isfinite(sweep["headroom"]).all()
    # headroom = 1 − oracle / point SJF, from the same runs' means
    assert np.allclose(sweep["headroom"], 1 - sweep["oracle"] / sweep["sjf"])
    assert choose_loads(sweep, 1) == [float(sweep.loc[sweep["headroom"].idxmax(), "load"])]
    with pytest.raises(ValueError, match="n_loads"):
        choose_loads(sweep, 3)
    keys = {"linear": point} | uncertainty_keys("h", d, 512.0)
    _, gains = run_uncertainty_sched(samples, np.full(n, 50.0), keys, hardware="cpu-smollm2-135m-vllm", loads=[0.95],
                                     seeds=[0, 1, 2], n_requests=150, lower_bounds=["linear"])
    assert "p_value" in gains.columns
    md = nulls_markdown(gains, 0.95)
    lines = md.splitlines()
    assert lines[2].startswith("| oracle-sjf | clairvoyant |") and "(the headroom)" in lines[2]
    assert any(line.startswith("| sjf | h:q0.9 |") for line in lines) and "| sjf | linear |" not in md


def test_headroom_seeds_must_not_be_the_reported_ones(tmp_path):
    from omegaconf import OmegaConf

    from lengthpred.errors import ConfigError
    from lengthpred.stages.dist import sched_loads

    sc = OmegaConf.create({"loads": "headroom", "seeds": [0, 1], "n_requests": 50, "hardware": "cpu-smollm2-135m-vllm",
                           "headroom": {"candidates": [0.8], "seeds": [1, 2], "n_loads": 1}})
    with pytest.raises(ConfigError, match="also reported"):
        sched_loads(sc, [[5, 6]], np.ones(1), np.ones(1), tmp_path)
    sc.loads = "auto"
    with pytest.raises(ConfigError, match="'headroom'"):
        sched_loads(sc, [[5, 6]], np.ones(1), np.ones(1), tmp_path)
    sc.loads = [0.8, 0.95]
    assert sched_loads(sc, [[5, 6]], np.ones(1), np.ones(1), tmp_path) == ([0.8, 0.95], "")
