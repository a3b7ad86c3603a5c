"""Scheduling workloads: one sampled length per request, real prompt lengths, clairvoyant vs mean-oracle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.sched import get_profile
from lengthpred.sched.sweep.experiment import parse_policies, run_grid
from lengthpred.sched.sweep.pool import CLAIRVOYANT, MEAN_ORACLE, LengthSource
from lengthpred.sched.sweep.sources import from_predictions, synthetic


def test_each_request_draws_one_of_its_prompts_samples_not_their_mean():
    src = LengthSource("t", np.array([177]), np.array([40]), samples=[[10, 500, 20]])
    req = src.draw(3000, np.random.default_rng(0))
    assert set(req.output.tolist()) == {10, 500, 20}  # never the smoothed 176.7
    share = np.bincount(np.searchsorted([10, 20, 500], req.output), minlength=3) / len(req.output)
    assert share == pytest.approx([1 / 3] * 3, abs=0.03)  # uniform over the samples
    # the mean-oracle's key: the leave-one-out mean of the other two samples, never the full mean 176.7
    assert req.expected[req.output == 500] == pytest.approx(15.0)
    assert req.expected[req.output == 10] == pytest.approx(260.0)
    assert req.expected[req.output == 20] == pytest.approx(255.0)
    assert not np.isclose(req.expected, 530 / 3).any()
    assert (req.prompt == 40).all()


def test_draw_keeps_requests_aligned_and_the_old_stream_without_samples():
    samples = [[5], [100, 300], [7, 8, 9, 10]]
    src = LengthSource("t", np.array([5, 200, 8]), np.array([1, 2, 3]), {"h": np.array([1.0, 2.0, 3.0])},
                       samples=samples)
    req = src.draw(500, np.random.default_rng(1))
    for i, out, prm in zip(req.idx, req.output, req.prompt, strict=True):
        assert out in samples[i] and prm == i + 1
    plain = LengthSource("t", np.array([5, 200, 8]), np.array([1, 2, 3]))
    assert plain.draw(50, np.random.default_rng(3)).idx.tolist() == \
        np.random.default_rng(3).integers(0, 3, 50).tolist()
    assert plain.draw(50, np.random.default_rng(3)).expected is None
    with pytest.raises(DataError, match="no sampled length"):
        LengthSource("t", np.array([5]), np.array([1]), samples=[[]])
    with pytest.raises(DataError, match="samples for 1 of 2"):
        LengthSource("t", np.array([5, 6]), np.array([1, 1]), samples=[[5]])


def _predictions(path, ids, y):
    rows = [dict(head="ridge", split="indomain/all/test", id=i, domain="chat", y_true=v, y_pred=v + 1.0,
                 n_samples=3, capped_frac=0.0) for i, v in zip(ids, y, strict=True)]
    pd.DataFrame(rows).to_parquet(path)


def test_predictions_source_carries_samples_and_real_prompt_tokens(tmp_path):
    f = tmp_path / "predictions.parquet"
    ids = ["a", "b", "c"]
    _predictions(f, ids, [176.7, 50.0, 9.0])
    samples = {"a": [10, 500, 20], "b": [50, 50, 50], "c": [8, 9, 10], "zz": [1]}
    tokens = {"a": 35, "b": 933, "c": 120}
    src = from_predictions(f, samples=samples, prompt_tokens=tokens)
    assert src.has_samples and src.prompt.tolist() == [35, 933, 120]
    assert src.expected.tolist() == pytest.approx([530 / 3, 50.0, 9.0])
    assert set(src.draw(200, np.random.default_rng(0)).output.tolist()) <= {10, 500, 20, 50, 8, 9}
    assert not from_predictions(f).has_samples  # no samples given: y_true, a smoothed truth
    assert from_predictions(f).prompt.tolist() == [128] * 3  # no counts anywhere: the configured constant
    with pytest.raises(DataError, match="no sampled lengths for 1 of 3"):
        from_predictions(f, samples={"a": [1], "b": [2]})
    with pytest.raises(DataError, match="no prompt token count for 2 of 3"):
        from_predictions(f, prompt_tokens={"a": 3})


def _grid(src, **kw):
    policies = parse_policies(["fcfs", "sjf", "oracle-sjf"])
    runs, _ = run_grid(src, get_profile("a100-llama2-7b", {"max_batch": 8}), policies, loads=[0.95], seeds=[0, 1, 2],
                       n_requests=600, progress=False, **kw)
    return runs[runs.metric == "per_token_latency_mean"].groupby(["policy", "predictor"])["value"].mean()


def test_clairvoyant_and_mean_oracle_differ_on_noisy_lengths_and_agree_without_noise():
    noisy = _grid(synthetic(2000, n_samples=3, sample_sigma=1.0, seed=0))
    assert (MEAN_ORACLE in noisy.loc["sjf"].index) and (CLAIRVOYANT in noisy.loc["oracle-sjf"].index)
    clair, mean = noisy.loc[("oracle-sjf", CLAIRVOYANT)], noisy.loc[("sjf", MEAN_ORACLE)]
    assert clair < 0.97 * mean  # knowing the request's own sample beats knowing the prompt's mean
    # one sample per prompt: the mean-oracle knows each request's length too, and schedules identically
    same = synthetic(2000, n_samples=1, seed=0)
    exact = _grid(same)
    assert exact.loc[("sjf", MEAN_ORACLE)] == pytest.approx(exact.loc[("oracle-sjf", CLAIRVOYANT)], rel=1e-12)
    assert MEAN_ORACLE not in _grid(synthetic(2000, n_samples=0, seed=0)).loc["sjf"].index
    assert MEAN_ORACLE not in _grid(same, mean_oracle=False).loc["sjf"].index


def test_prompt_tokens_reach_the_simulated_server():
    """Long prompts cost prefill time and KV memory: the same lengths with real (long) prompts serve slower."""
    rng = np.random.default_rng(0)
    out = rng.integers(20, 400, 300)
    short = LengthSource("t", out, np.full(300, 16), samples=[[x] for x in out])
    long = LengthSource("t", out, np.full(300, 1500), samples=[[x] for x in out])
    kw = dict(loads=[0.9], seeds=[0], n_requests=300, progress=False)
    prof, pol = get_profile("a100-llama2-7b"), parse_policies(["fcfs"])

    def ttft(src):
        return run_grid(src, prof, pol, **kw)[0].query("metric == 'ttft_mean'")["value"].iloc[0]

    assert ttft(long) > 2 * ttft(short)  # the arrival rate follows capacity, but each prefill takes longer


def test_mean_oracle_leaves_the_requests_own_sample_out_and_warns_with_one_sample(caplog):
    src = LengthSource("t", np.array([177, 5]), np.array([40, 40]), samples=[[10, 500, 20], [7, 9]])
    assert src.loo_mean(np.array([0, 0, 1]), np.array([500, 10, 9])) == pytest.approx([15.0, 260.0, 7.0])
    with caplog.at_level("WARNING", logger="lengthpred.sched"):
        one = LengthSource("t", np.array([5, 8]), np.array([1, 1]), samples=[[5], [6, 10]])
    assert "single sampled length" in caplog.text and "clairvoyant" in caplog.text
    req = one.draw(200, np.random.default_rng(0))
    solo = req.idx == 0
    assert (req.expected[solo] == 5).all()  # one sample: no others, the key falls back to it
    assert set(req.expected[~solo].tolist()) <= {6.0, 10.0} and (req.expected[~solo] != req.output[~solo]).all()


def test_random_predictor_is_a_row_and_no_better_than_chance():
    """`random` keys each prompt on a random length: on data where nothing predicts length, its gain over
    FCFS is not systematically positive, while the clairvoyant oracle's is."""
    from lengthpred.sched.sweep.pool import RANDOM

    rng = np.random.default_rng(5)
    out = np.maximum(rng.lognormal(np.log(200), 1.0, 1500), 1).astype(int)
    src = LengthSource("flat", out.astype(float), np.full(1500, 64),
                       samples=[[x, max(1, int(x * f))] for x, f in zip(out, rng.uniform(0.7, 1.3, 1500), strict=True)])
    policies = parse_policies(["fcfs", "sjf", "oracle-sjf"])
    runs, _ = run_grid(src, get_profile("a100-llama2-7b", {"max_batch": 8}), policies, loads=[0.95],
                       seeds=list(range(6)), n_requests=500, progress=False, random_predictor=True)
    m = runs[runs.metric == "per_token_latency_mean"].pivot_table(index="seed", columns=["policy", "predictor"],
                                                                  values="value")
    assert ("sjf", RANDOM) in m.columns and ("sjf", MEAN_ORACLE) in m.columns
    fcfs, rand, orc = m[("fcfs", "none")], m[("sjf", RANDOM)], m[("oracle-sjf", CLAIRVOYANT)]
    oracle_gain = 1 - orc.mean() / fcfs.mean()
    rand_gain = 1 - rand.mean() / fcfs.mean()
    assert oracle_gain > 0.05
    assert rand_gain < 0.3 * oracle_gain  # no systematic share of the oracle's gain
    assert (rand != orc).all()
    # fixed per seed: the same seed gives the same row
    again, _ = run_grid(src, get_profile("a100-llama2-7b", {"max_batch": 8}), policies, loads=[0.95], seeds=[0],
                        n_requests=500, progress=False, random_predictor=True)
    a = again.query("metric == 'per_token_latency_mean' and predictor == @RANDOM")["value"].iloc[0]
    assert a == pytest.approx(rand.loc[0])
    assert RANDOM not in set(run_grid(src, get_profile("a100-llama2-7b"), policies, loads=[0.95], seeds=[0],
                                      n_requests=200, progress=False)[0]["predictor"])
