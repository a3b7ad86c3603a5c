"""Measured speculative acceptance (issue 16, item 4): the n-gram drafter, exact acceptance along sampled answers,
the acceptance file, the simulator's rate mapping, LAPS-SD's early estimate, and both scripts end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import open_dict

from lengthpred.errors import ConfigError, DataError
from lengthpred.generate.backends import Sample
from lengthpred.sched import HardwareProfile, Workload, capacity, make_policy, simulate
from lengthpred.sched.core.early import early_estimates
from lengthpred.sched.core.policies import SchedContext
from lengthpred.sched.spec.acceptance import (
    NgramDrafter,
    beta_moments,
    emitted,
    measure,
    measure_answer,
    rate_acceptance,
    request_stats,
    variability_summary,
)
from lengthpred.sched.spec.experiment import measured_pool, run_spec_grid, spec_profile, summarize_spec
from lengthpred.sched.spec.records import COLUMNS, META_KEY, SCHEMA, read_records, write_records
from lengthpred.sched.sweep.experiment import parse_policies
from lengthpred.stages.acceptance import measure_acceptance
from lengthpred.stages.spec import run_spec

from .conftest import compose_cfg

K = 4


def _brute(ctx: list[int], lo: int, hi: int, k: int, earliest: bool = True) -> list[int]:
    """The drafting rule spelled out as loops: the longest suffix n-gram with an earlier occurrence (ending before
    the last token), its earliest (or latest) occurrence, then up to k following tokens."""
    t = len(ctx)
    for n in range(hi, lo - 1, -1):
        if n > t - 1:
            continue
        starts = [s for s in range(t - n) if s + n <= t - 1 and ctx[s:s + n] == ctx[t - n:]]
        if starts:
            s = starts[0] if earliest else starts[-1]
            return ctx[s + n: s + n + k]
    return []


@pytest.mark.parametrize("ctx,lo,hi,k,want", [
    ([1, 2, 3, 9, 1, 2, 3], 1, 3, 4, [9, 1, 2, 3]),  # the 3-gram repeats: the 4 tokens after it
    ([1, 2, 3, 9, 1, 2, 3], 1, 3, 2, [9, 1]),  # cut at k
    ([5, 6, 7, 5, 6], 2, 2, 4, [7, 5, 6]),  # fewer than k tokens follow the match: up to the context's end
    ([1, 2, 3, 4], 1, 3, 4, []),  # no match: no proposal
    ([7, 1, 2, 7], 2, 3, 4, []),  # only a 1-gram repeats and min is 2
    ([7, 1, 2, 7], 1, 3, 4, [1, 2, 7]),
    ([2, 8, 1, 2, 9, 1, 2], 1, 2, 4, [9, 1, 2]),  # the longer n-gram [1, 2] wins over the earlier 1-gram [2]
    ([2, 8, 1, 2, 9, 1, 2], 1, 1, 4, [8, 1, 2, 9]),
    ([3, 3, 3], 2, 2, 4, [3]),  # an occurrence may overlap the suffix, not be it
])
def test_drafter_on_hand_made_contexts(ctx, lo, hi, k, want):
    assert NgramDrafter(k, lo, hi).propose(ctx).tolist() == want


def test_drafter_takes_the_earliest_occurrence_like_vllm_and_latest_on_request():
    ctx = [1, 2, 5, 1, 2, 6, 1, 2]
    assert NgramDrafter(4, 2, 2).propose(ctx).tolist() == [5, 1, 2, 6]
    assert NgramDrafter(4, 2, 2, occurrence="latest").propose(ctx).tolist() == [6, 1, 2]
    rng = np.random.default_rng(0)
    for _ in range(400):
        ctx = rng.integers(0, 4, rng.integers(1, 30)).tolist()
        lo = int(rng.integers(1, 3))
        hi = lo + int(rng.integers(0, 3))
        for earliest in (True, False):
            d = NgramDrafter(3, lo, hi, occurrence="earliest" if earliest else "latest")
            assert d.propose(ctx).tolist() == _brute(ctx, lo, hi, 3, earliest), (ctx, lo, hi, earliest)
    with pytest.raises(ConfigError, match="prompt_lookup_min"):
        NgramDrafter(4, 3, 2)


def test_a_point_mass_draft_is_accepted_exactly_when_the_output_token_equals_it():
    """Speculative sampling with q = δ_d: accept with min(1, p(d)/q(d)), else sample max(0, p − q) normalised.
    The output keeps p's distribution, and 'accepted' is the event output == d: acceptance along sampled
    answers is a prefix match."""
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(6))
    d = 2
    q = np.eye(6)[d]
    resid = np.maximum(p - q, 0)
    resid /= resid.sum()
    n = 200_000
    accept = rng.random(n) < min(1.0, p[d] / q[d])
    y = np.where(accept, d, rng.choice(6, n, p=resid))
    assert np.array_equal(accept, y == d)
    assert np.abs(np.bincount(y, minlength=6) / n - p).max() < 0.005


def test_acceptance_is_the_prefix_match_step_by_step():
    prompt, answer = [10, 11, 12, 13], [10, 11, 12, 99, 10, 11, 12, 13]
    # step 1 drafts [11, 12, 13, 10] after the 1-gram [10]: 2 match; step 2 has no match; step 3 drafts
    # [11, 12, 13, 10], cut to the 3 tokens left, all match
    prop, acc = measure_answer(prompt, answer, NgramDrafter(K, 1, 3))
    assert (prop, acc) == ([0, 4, 0, 3], [0, 2, 0, 3])
    assert emitted(acc, len(answer)).tolist() == [1, 3, 1, 3]
    # the latest occurrence of [10] at step 3 is the answer's own, followed by 99: only 2 match
    assert measure_answer(prompt, answer, NgramDrafter(K, 1, 3, occurrence="latest")) == ([0, 4, 0, 3], [0, 2, 0, 2])
    # a draft past the answer's end is cut at it, and the last step emits only what is left
    assert measure_answer([1, 2, 3, 4, 5], [1, 2], NgramDrafter(K, 1, 3)) == ([0, 1], [0, 1])
    assert emitted([0, 1], 2).tolist() == [1, 1]
    assert measure_answer([1, 2], [], NgramDrafter(K, 1, 3)) == ([0], [0])


def test_step_accounting_on_random_answers():
    rng = np.random.default_rng(2)
    drafter = NgramDrafter(K, 1, 3)
    for _ in range(200):
        prompt = rng.integers(0, 5, rng.integers(1, 20)).tolist()
        answer = rng.integers(0, 5, rng.integers(1, 60)).tolist()
        prop, acc = measure_answer(prompt, answer, drafter)
        e = emitted(acc, len(answer))
        assert e.sum() == len(answer) and e.min() >= 1 and prop[0] == acc[0] == 0
        assert all(0 <= a <= p <= K for p, a in zip(prop, acc, strict=True))
        assert (e[:-1] == np.array(acc[:-1]) + 1).all()  # every step but the last emits accepted + 1


def _profile(**kw) -> HardwareProfile:
    base = dict(name="t", t_base=0.01, t_seq=0.002, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                max_batch=8, token_budget=4096, kv_blocks=4000, block_size=16, n_draft=K, t_draft=0.0)
    return HardwareProfile(**{**base, **kw})


@pytest.mark.parametrize("L,steps", [(275, 168), (512, 103), (7, 7), (100, 21), (1, 1), (33, 32)])
def test_the_rate_mapping_gives_exactly_the_measured_steps_alone_on_the_server(L, steps):
    prof = _profile()
    a = rate_acceptance(L, steps, K)
    res = simulate(Workload([0.0], [10], [L], np.atleast_1d(a)), prof, make_policy("fcfs"), speculative=True)
    assert res.n_steps == steps
    assert res.finish[0] == pytest.approx(steps * prof.step_time(1, speculative=True))


def test_measured_sequences_drive_the_simulator_to_their_own_step_count():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8] * 4
    answer = [1, 2, 3, 4, 9, 5, 6, 7, 8, 1, 2, 3] * 6
    prop, acc = measure_answer(prompt, answer, NgramDrafter(K, 1, 3))
    a = rate_acceptance(len(answer), len(acc), K)
    assert 0 < a < 1
    res = simulate(Workload([0.0], [len(prompt)], [len(answer)], np.atleast_1d(a), [np.array(acc)]), _profile(),
                   make_policy("laps-sd", oracle=True), speculative=True)
    assert res.n_steps == len(acc)


def test_laps_sd_reads_its_estimate_from_the_first_steps_only():
    seq = [0, 4, 4, 0, 0, 0, 0, 0, 0]
    ks, a = early_estimates([seq], K, stability="steps", min_steps=3)
    assert ks.tolist() == [3] and a.tolist() == [1.0]  # after 3 steps of service: decode steps 1 and 2 seen
    ks, a = early_estimates([seq], K, stability="steps", min_steps=5)
    assert a.tolist() == [0.5]
    later = [0, 4, 4] + [4] * 6  # what comes after the estimate's steps does not move it
    assert early_estimates([later], K, min_steps=3)[1].tolist() == [1.0]
    # stderr on the running estimate: constant 0.5 needs 0.25 <= n·m·tol² → m = 25 decode steps, s = 26
    ks, a = early_estimates([[0] + [2] * 40], K, stability="stderr", tol=0.05)
    assert ks.tolist() == [26] and a.tolist() == [0.5]
    ks, _ = early_estimates([[0] + [2] * 10], K, stability="stderr", tol=0.05)
    assert ks.tolist() == [12]  # never stable within its 11 steps: never perceptible
    assert early_estimates([[0, 0, 4, 4]], K, stability="stderr")[0].tolist() == [2]  # Â = 0 at once: se 0
    # the policy takes them from the workload's sequences and draws no noise
    n = 2
    seqs = [np.array(seq), np.array(later)]
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    ctx = SchedContext(np.zeros(n), np.array([20, 30]), np.zeros(n), None, np.full(n, 2.0), np.full(n, 0.25),
                       _profile(), True, rng, seqs)
    pol = make_policy("laps-sd", min_steps=3, oracle=True)
    pol.bind(ctx)
    assert pol.a_hat.tolist() == [1.0, 1.0] and pol.k_stable.tolist() == [3, 3]
    assert rng.bit_generator.state == state


def test_capacity_from_each_requests_steps():
    prof = _profile()
    out, prm = np.array([100, 400]), np.array([10, 10])
    same = np.array([0.5, 0.5])
    assert capacity(prof, prm, out, same, True, mean_steps=True) == pytest.approx(capacity(prof, prm, out, same, True))
    mixed = np.array([1.0, 0.0])  # the long request is the slow one: E[L/r] > E[L]/E[r]
    assert capacity(prof, prm, out, mixed, True, mean_steps=True) < capacity(prof, prm, out, mixed, True)
    with pytest.raises(DataError, match="acceptance sequences"):
        Workload([0.0, 1.0], [1, 1], [5, 5], None, [np.array([0]), np.array([0])])


def _records(n: int = 30, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    drafter = NgramDrafter(K, 1, 3)
    prompts, answers = [], []
    for i in range(n):
        base = rng.integers(0, 50, 12).tolist()
        prompts.append((f"{i:016x}", ["chat", "code"][i % 2], base * 2))
        reps = int(rng.integers(1, 6))
        noise = rng.integers(0, 50, int(rng.integers(5, 80))).tolist()
        answers.append((f"{i:016x}", [Sample(base * reps + noise, "eos" if i % 3 else "length")]))
    return measure(prompts, answers, drafter, progress=False)


META = {"drafter": NgramDrafter(K, 1, 3).to_dict(), "data": "tiny"}


def test_records_round_trip_and_bad_files_stop_with_one_line(tmp_path):
    df = _records()
    path = write_records(df, tmp_path / "spec.parquet", META)
    rec = read_records(path)
    assert len(rec) == len(df) and rec.k == K and rec.meta["data"] == "tiny"
    assert [x.tolist() for x in rec.frame["accepted"]] == [list(x) for x in df["accepted"]]

    def bad(frame: pd.DataFrame, name: str, meta: dict | None = META, schema=SCHEMA) -> str:
        table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
        if meta is not None:
            table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
        pq.write_table(table, tmp_path / name)
        with pytest.raises(DataError) as e:
            read_records(tmp_path / name)
        msg = str(e.value)
        assert "\n" not in msg and name in msg, msg
        return msg

    over = df.copy()
    over.at[3, "accepted"] = [0] + [a + 1 for a in over.at[3, "accepted"][1:]]  # more than proposed somewhere
    assert "field accepted" in bad(over, "over.parquet") and "row 3" in bad(over, "over.parquet")
    short = df.copy()
    short.at[5, "output_tokens"] = short.at[5, "output_tokens"] + 3  # the steps do not emit the answer
    assert "field accepted" in bad(short, "short.parquet") and "row 5" in bad(short, "short.parquet")
    fin = df.copy()
    fin.at[0, "finish_reason"] = "stop"
    assert "field finish_reason" in bad(fin, "finish.parquet")
    wide = df.copy()
    wide.at[2, "proposed"] = [0] + [K + 1] * (len(wide.at[2, "proposed"]) - 1)
    assert "field proposed" in bad(wide, "wide.parquet")
    assert "field drafter" in bad(df, "nometa.parquet", meta=None)
    cols = [c for c in COLUMNS if c != "accepted"]
    assert "field accepted: missing column" in bad(df[cols], "nocol.parquet", schema=pa.schema([SCHEMA.field(c) for c in cols]))
    (tmp_path / "text.parquet").write_text("id,accepted\n")
    with pytest.raises(DataError, match="not a readable parquet") as e:
        read_records(tmp_path / "text.parquet")
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="make spec"):
        read_records(tmp_path / "missing.parquet")


def test_statistics_on_known_sequences():
    df = pd.DataFrame([dict(id="a", sample=0, domain="chat", prompt_tokens=3, output_tokens=11, finish_reason="eos",
                            proposed=[0, 4, 0, 4, 4], accepted=[0, 4, 0, 2, 0])])
    st = request_stats(df, K, early_k=[2])
    r = st.iloc[0]
    assert r.steps == 5 and r.tokens_per_step == pytest.approx(11 / 5)
    assert r.accept == pytest.approx((11 / 5 - 1) / K)
    assert r.accept_per_proposed == pytest.approx(6 / 12) and r.no_proposal_share == pytest.approx(0.25)
    assert r.early_2 == pytest.approx(4 / 8) and r.rest_2 == pytest.approx(2 / 2 / K)
    a, b = beta_moments(np.array([0.1, 0.3, 0.2, 0.4]))
    assert a / (a + b) == pytest.approx(0.25)
    summ = variability_summary(request_stats(_records(), K), _records(), K, early_k=[4]).set_index("metric")
    assert 0 <= summ.loc["step_var_within_share", "value"] <= 1
    assert summ.loc["requests", "value"] == 30


def test_regimes_share_requests_and_arrivals_and_only_the_estimate_differs(tmp_path):
    df = _records(40, seed=3)
    rec = read_records(write_records(df, tmp_path / "r.parquet", META))
    pool = measured_pool(rec)
    prof = spec_profile(_profile(max_batch=2), rec.k, 0.0)
    pols = parse_policies(["fcfs", {"name": "laps-sd", "label": "oracle-laps-sd", "oracle": True, "min_steps": 4}])
    runs = run_spec_grid(pool, prof, pols, regimes=["measured", "measured-rate"], loads=[0.9], seeds=[0, 1],
                         n_requests=60, progress=False)
    key = runs[runs["metric"] == "per_token_latency_mean"].set_index(["regime", "policy", "seed"])["value"]
    for s in (0, 1):  # the same requests, rates and arrivals: FCFS is identical
        assert key[("measured", "fcfs", s)] == key[("measured-rate", "fcfs", s)]
    assert not np.allclose([key[("measured", "oracle-laps-sd", s)] for s in (0, 1)],
                           [key[("measured-rate", "oracle-laps-sd", s)] for s in (0, 1)])
    summary, gain = summarize_spec(runs)
    assert set(gain["metric"]) == {"gain_vs_fcfs"}  # no MLFQ in the grid: no gain over it
    with pytest.raises(ConfigError, match="n_draft"):
        run_spec_grid(pool, _profile(n_draft=3), pols, loads=[0.9], seeds=[0], n_requests=10, progress=False)


def _data(tmp_path, n: int = 6) -> list[str]:
    import datasets

    ids = [f"{i:016x}" for i in range(n)]
    texts = ["Repeat after me: the cat sat on the mat. " * (i + 1) for i in range(n)]
    out = tmp_path / "splits" / "tiny"
    datasets.Dataset.from_dict({"id": ids, "domain": ["chat", "code"] * (n // 2),
                                "messages": [[{"role": "user", "content": t}] for t in texts]}).save_to_disk(
        str(out / "prompts"))
    (out / "splits.json").write_text(json.dumps({"indomain": {
        "chat": {"train": [], "test": ids[0::2]}, "code": {"train": [], "test": ids[1::2]}}}))
    return ids


def test_scripts_end_to_end_on_a_fake_generator(tmp_path, tokenizer):
    ids = _data(tmp_path)
    cfg = compose_cfg(["data=demo", "sched.spec.answers=vllm", "sched.spec.drafter.prompt_lookup_min=1",
                       "sched.spec.n_requests=50", "sched.spec.seeds=[0,1]", "sched.spec.loads=[0.9]"], tmp_path)
    with open_dict(cfg):
        cfg.paths.data_dir = str(tmp_path)
        cfg.data.name = "tiny"
        cfg.data.out_dir = str(tmp_path / "splits" / "tiny")
        cfg.sched.spec.path = str(tmp_path / "reference" / "spec_ngram_tiny.parquet")
        cfg.sched.spec.answers_cache = str(tmp_path / "cache")
    seen: dict[str, tuple[list[int], list[int]]] = {}

    def fake(items, settings):
        assert settings.num_samples == 1 and settings.temperature == cfg.generate.temperature
        for pid, toks in reversed(items):  # any order
            answer = toks[-12:] * 3 + [int(pid, 16) + 7] * 5
            seen[pid] = (list(toks), answer)
            yield pid, [Sample(answer, "eos")]

    path = measure_acceptance(cfg, generate=fake, tokenizer=tokenizer, progress=False)
    rec = read_records(path)
    assert sorted(rec.frame["id"]) == ids and set(rec.frame["domain"]) == {"chat", "code"}
    drafter = NgramDrafter(K, 1, 4)
    for r in rec.frame.itertuples():
        toks, answer = seen[r.id]
        assert r.prompt_tokens == len(toks) and r.output_tokens == len(answer)
        assert (list(r.proposed), list(r.accepted)) == measure_answer(toks, answer, drafter)
    assert rec.frame["accepted"].map(lambda a: a.sum()).sum() > 0  # the repeats were drafted and accepted

    def boom(items, settings):
        raise AssertionError("generated again although the answers are cached")

    with open_dict(cfg):
        cfg.sched.spec.answers = "auto"
    again = read_records(measure_acceptance(cfg, generate=boom, tokenizer=tokenizer, progress=False))
    assert [a.tolist() for a in again.frame["accepted"]] == [a.tolist() for a in rec.frame["accepted"]]

    out = run_spec(cfg, tmp_path / "sim", progress=False)
    table = pd.read_csv(out / "spec_table.csv")
    assert set(table["regime"]) == {"measured", "measured-rate", "beta-matched", "beta-7-3"}
    laps = table[table["policy"] == "oracle-laps-sd"]
    assert len(laps) == 4 and laps["gain_vs_fcfs"].notna().all() and laps["gain_vs_mlfq"].notna().all()
    for f in ("spec_runs.csv", "spec_results.csv", "spec_gains.csv", "spec_table.md", "acceptance.md",
              "acceptance.csv", "spec_latency.png", "spec.json"):
        assert (out / f).is_file(), f
    assert "oracle-laps-sd" in (out / "spec_table.md").read_text()
