"""Stream runner and completion models on a planted drifting linear model."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.errors import ConfigError
from lengthpred.online import (
    CallableCompletion,
    HeadSpec,
    InstantCompletion,
    NLMSRegressor,
    RLSRegressor,
    ServingCompletion,
    SlidingWindowRidge,
    StaticReadout,
    gain_over_static,
    run_stream,
)
from lengthpred.online.synthetic import drifting_stream


def _heads() -> dict[str, HeadSpec]:
    return {
        "static": HeadSpec(StaticReadout(1.0)),
        "rls@1": HeadSpec(RLSRegressor(1.0, forgetting=1.0)),
        "rls@0.99": HeadSpec(RLSRegressor(1.0, forgetting=0.99)),
        "sgd": HeadSpec(NLMSRegressor(1.0)),
        "window": HeadSpec(SlidingWindowRidge(1.0, window=100)),
        "oracle_refit": HeadSpec(StaticReadout(1.0), fit_on="source+stream", update=False),
        "indomain": HeadSpec(StaticReadout(1.0), fit_on="stream", update=False),
    }


def test_rls_recovers_under_large_shift_and_static_does_not():
    r = run_stream(_heads(), drifting_stream(shift=1.0, seed=0), ServingCompletion(seed=0), progress=False)
    s = r.summary.set_index("head")
    assert s.at["static", "test_spearman"] < 0.4
    assert s.at["rls@0.99", "test_spearman"] > 0.85
    assert s.at["rls@0.99", "test_spearman"] > s.at["indomain", "test_spearman"] - 0.05
    assert gain_over_static(r.summary, "rls@0.99")["test_spearman_delta"] > 0.4
    # the curve starts at the offline fit and ends higher
    c = r.curves[r.curves["head"] == "rls@0.99"]
    assert c["n_updates"].iloc[0] == 0 and c["n_updates"].iloc[-1] == 400
    assert c["test_spearman"].iloc[-1] > c["test_spearman"].iloc[0] + 0.4


def test_no_shift_no_harm():
    r = run_stream(_heads(), drifting_stream(shift=0.0, seed=1), InstantCompletion(), progress=False)
    s = r.summary.set_index("head")
    assert abs(s.at["rls@1", "test_spearman"] - s.at["static", "test_spearman"]) < 0.02


def test_lengths_revealed_only_at_completion():
    """A request is predicted before any request that completes after its arrival is learned."""
    data = drifting_stream(shift=1.0, n_stream=60, seed=2)
    seen: list[int] = []

    class Spy(StaticReadout):
        def partial_fit(self, X, y):
            seen.append(int(np.flatnonzero((data.X_stream == X).all(axis=1))[0]))
            return super().partial_fit(X, y)

    comp = ServingCompletion(load=None, arrival_rate=5.0, tokens_per_s=10.0, max_concurrency=4, seed=0)
    r = run_stream({"spy": HeadSpec(Spy(1.0))}, data, comp, record_every=5, progress=False)
    sp = r.stream_predictions
    assert sorted(seen) == list(range(60))
    assert seen != list(range(60))  # completions come back out of arrival order
    assert (sp["done_s"] >= sp["arrival_s"] + 0.2 - 1e-12).all()
    assert np.isfinite(sp["y_pred"]).all()
    # labels_seen at a request's arrival = completions strictly before it; in_flight = the others arrived
    for r in sp.itertuples():
        assert r.labels_seen == int((sp["done_s"] < r.arrival_s).sum())
        assert r.in_flight == int((sp["arrival_s"] < r.arrival_s).sum()) - r.labels_seen


def test_serving_completion_is_a_fcfs_queue():
    lengths = np.array([100.0, 10.0, 10.0])
    arr, done = ServingCompletion(
        load=None, arrival_rate=100.0, tokens_per_s=10.0, max_concurrency=1, prefill_s=0.0
    ).schedule(lengths)
    assert done[0] == pytest.approx(arr[0] + 10.0)
    assert done[1] == pytest.approx(done[0] + 1.0) and done[2] == pytest.approx(done[1] + 1.0)


def test_callable_completion_validated():
    with pytest.raises(ConfigError):
        CallableCompletion(lambda y: (np.arange(len(y)), np.arange(len(y)) - 1.0)).schedule(np.ones(3))
    with pytest.raises(ConfigError):
        HeadSpec(StaticReadout(), fit_on="target")


def test_scheduler_completion_from_sched_simulator():
    from lengthpred.online.completion import SchedulerCompletion

    lengths = np.array([200.0, 20.0, 50.0, 120.0, 10.0, 80.0])
    arr, done = SchedulerCompletion(load=None, arrival_rate=1.0, prompt_tokens=64).schedule(lengths)
    assert arr.shape == done.shape == (6,)
    ok = np.isfinite(done)
    assert ok.any() and (done[ok] > arr[ok]).all()


def test_mean_label_head_learns_the_mean_and_others_the_revealed_sample():
    data = drifting_stream(shift=1.0, n_stream=40, seed=3)
    data.y_stream_mean = data.y_stream * 2.0 + 7.0  # a different "mean" so the two labels are told apart
    got: dict[str, list[float]] = {"revealed": [], "mean": []}

    def spy(kind):
        class Spy(StaticReadout):
            def partial_fit(self, X, y):
                got[kind].append(float(np.asarray(y)[0]))
                return super().partial_fit(X, y)

        return Spy(1.0)

    heads = {"a": HeadSpec(spy("revealed")), "b": HeadSpec(spy("mean"), label="mean")}
    run_stream(heads, data, InstantCompletion(), progress=False)
    assert sorted(got["revealed"]) == sorted(data.y_stream.tolist())
    assert sorted(got["mean"]) == sorted(data.y_stream_mean.tolist())
    with pytest.raises(ConfigError):
        HeadSpec(StaticReadout(), label="median")


def test_stream_scores_leave_out_the_validation_requests():
    data = drifting_stream(shift=1.0, n_stream=60, seed=4)
    data.is_val = np.arange(60) % 4 == 0
    r = run_stream({"static": HeadSpec(StaticReadout(1.0))}, data, InstantCompletion(), progress=False)
    s = r.summary.iloc[0]
    sp = r.stream_predictions
    rep, val = sp[~sp["is_val"]], sp[sp["is_val"]]
    from scipy.stats import spearmanr

    assert s["stream_spearman"] == pytest.approx(spearmanr(rep["y_true"], rep["y_pred"]).statistic)
    assert s["val_spearman"] == pytest.approx(spearmanr(val["y_true"], val["y_pred"]).statistic)
