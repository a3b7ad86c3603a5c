"""The `vllm bench serve` campaign's bookkeeping, with the server and client replaced by a recorder: what each run
sends (the configured answer cap, the repeat's prompts and seed), the rotated arm order, resume, and what the
manifest records for the results page."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from docsgen.pages.serving_plugin import _max_tokens
from lengthpred.serve.vllm_bench import ARMS, ServerSpec, Workload
from lengthpred.serve.vllm_bench_campaign import Campaign, Cell, prompt_sets


class Recorded(Campaign):
    """Every run recorded instead of served: its arm, workload and file stem."""

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.calls: list[tuple[str, Workload, Path]] = []

    def _run(self, a, w, stem, *, scratch_readout):
        self.calls.append((a.name, w, stem))
        stem.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(stem.with_suffix(".json.gz"), "wt") as f:
            json.dump({}, f)
        return {"request_throughput": 2.0, "duration": 1.0, "completed": w.n_requests, "output_throughput": 9.0}


def _campaign(tmp_path: Path, max_tokens: int, repeats: int = 3) -> Recorded:
    readout = tmp_path / "r.safetensors"
    readout.write_bytes(b"x")
    pool = [f"t{i}" for i in range(20)]
    cap = [f"v{i}" for i in range(5)]
    texts = {i: f"prompt {i}" for i in pool + cap}
    arms = [ARMS[a] for a in ("stock-fcfs", "plugin-fcfs", "plugin-sjf")]
    cell = Cell("c", load=0.5, n_requests=4, repeats=repeats, seed=1, capacity_bursts=2)
    spec = ServerSpec(tmp_path / "venv", "model", served_name="m")
    return Recorded(tmp_path / "cell", cell, arms, spec, readout, "tok", texts, pool, cap, max_tokens=max_tokens)


@pytest.mark.parametrize("max_tokens", [128, 512])
def test_every_run_and_the_manifest_carry_the_configured_answer_cap(tmp_path, max_tokens):
    camp = _campaign(tmp_path, max_tokens)
    camp.run()
    assert {w.max_tokens for _, w, _ in camp.calls} == {max_tokens}  # capacity bursts and every repeat
    manifest = json.loads((tmp_path / "cell" / "manifest.json").read_text())
    assert manifest["max_tokens"] == max_tokens
    cmd = manifest["commands"]["bench"]
    assert cmd[cmd.index("--custom-output-len") + 1] == str(max_tokens)
    assert _max_tokens(manifest) == max_tokens
    del manifest["max_tokens"]  # a cell written before the manifest recorded it: read from its client command
    assert _max_tokens(manifest) == max_tokens


def test_repeats_rotate_the_arms_serve_disjoint_prompts_at_their_own_seed_and_resume(tmp_path):
    camp = _campaign(tmp_path, 512)
    camp.run()
    runs = [(a, w, s) for a, w, s in camp.calls if "capacity" not in str(s)]
    assert len([s for _, _, s in camp.calls if "capacity" in str(s)]) == 2
    firsts = [runs[k * 3][0] for k in range(3)]
    assert firsts == ["stock-fcfs", "plugin-fcfs", "plugin-sjf"]  # each arm leads one repeat
    for k in range(3):
        ws = {(w.seed, w.request_rate, w.dataset) for _, w, _ in runs[3 * k:3 * k + 3]}
        assert len(ws) == 1 and next(iter(ws))[0] == 1000 + k  # one workload per repeat, shared by its arms
        assert next(iter(ws))[1] == pytest.approx(0.5 * 2.0)  # load x the capacity the bursts measured
    sets = prompt_sets([f"t{i}" for i in range(20)], 4, 3, 1)
    assert len({i for s in sets for i in s}) == 12
    done = camp.run_stem(1, ARMS["plugin-fcfs"]).with_suffix(".json.gz")
    done.unlink()
    again = _campaign(tmp_path, 512)
    assert again.run() == [done.with_suffix("").with_suffix("")]  # only the missing run, capacity reused
    assert [a for a, _, _ in again.calls] == ["plugin-fcfs"]


def _res(starts, ttfts, itls, errors=None):
    return {"start_times": starts, "ttfts": ttfts, "itls": itls, "errors": errors or [""] * len(starts)}


def test_the_full_batch_step_is_the_median_gap_while_the_batch_cap_is_held():
    import math

    from lengthpred.serve.vllm_bench_results import full_batch_step_ms

    # A decodes 1.0-2.0 s in 0.1 s steps, B 1.43-1.93 s; C's one 0.5 s gap (parked) spans 1.5-2.0 s
    res = _res([0.0, 0.38, 0.0], [1.0, 1.05, 1.5], [[0.1] * 10, [0.1] * 5, [0.5]])
    step, n = full_batch_step_ms(res, 2)
    assert step == pytest.approx(100.0) and n == 6 + 5 + 1  # A's gaps beside B or C, B's, C's
    assert full_batch_step_ms(res, 4) == (pytest.approx(math.nan, nan_ok=True), 0)  # never four at once
    failed = _res([0.0, 0.38], [1.0, 1.05], [[0.1] * 10, [0.1] * 5], errors=["", "timeout"])
    assert full_batch_step_ms(failed, 2)[1] == 0  # a failed request holds no slot
    assert math.isnan(full_batch_step_ms(res, None)[0])


def test_step_times_compare_each_arm_with_stock_in_the_same_repeat():
    import pandas as pd

    from lengthpred.serve.vllm_bench_report import step_times

    vruns = pd.DataFrame({"arm": ["stock-fcfs", "plugin-sjf"] * 3, "repeat": [0, 0, 1, 1, 2, 2],
                          "step_ms_full_batch": [50.0, 55.0, 40.0, 40.0, 60.0, 54.0],
                          "full_batch_intervals": [10, 12, 10, 12, 10, 12]})
    st = step_times(vruns, ["stock-fcfs", "plugin-sjf"], "stock-fcfs").set_index("arm")
    assert st.loc["stock-fcfs", "ratio_median"] == 1.0
    assert st.loc["plugin-sjf", "step_ms"] == 54.0
    assert (st.loc["plugin-sjf", "ratio_min"], st.loc["plugin-sjf", "ratio_median"],
            st.loc["plugin-sjf", "ratio_max"]) == pytest.approx((0.9, 1.0, 1.1))


def test_an_aging_weight_to_tune_is_named_in_the_arm_and_a_bad_one_is_one_line():
    from lengthpred.errors import ConfigError
    from lengthpred.serve.vllm_bench import arm
    from lengthpred.serve.vllm_bench_results import RUN

    a = arm("plugin-sjf-aging@3000")
    assert a.plugin == {"policy": "sjf", "aging_weight": 3000.0}
    assert RUN.search(f"r03_{a.name}.json.gz")["arm"] == a.name  # the run's file is read back under its arm
    capped = arm("plugin-sjf-aging@3000-y1")
    assert capped.plugin == {"policy": "sjf", "aging_weight": 3000.0, "max_yields": 1}
    assert RUN.search(f"r00_{capped.name}.json.gz")["arm"] == capped.name
    assert arm("plugin-sjf-y0").plugin == {"policy": "sjf", "max_yields": 0}
    assert arm("plugin-srpt-y4").plugin == {"policy": "srpt", "max_yields": 4}  # overrides the named arm's cap
    assert arm("plugin-sjf-aging@3000-y1-d30").plugin == {"policy": "sjf", "aging_weight": 3000.0, "max_yields": 1,
                                                         "deadline_s": 30.0}
    assert arm("plugin-sjf-d5").plugin == {"policy": "sjf", "deadline_s": 5.0}
    assert RUN.search("r01_plugin-sjf-aging@3000-y1-d30.json.gz")["arm"] == "plugin-sjf-aging@3000-y1-d30"
    for bad in ("plugin-sjf-aging@", "plugin-sjf-aging@-5", "plugin-sjf-aging@1e3", "plugin-sjf@300", "fifo",
                "plugin-sjf-y", "plugin-sjf-y-1", "plugin-sjf-aging@30-y1.5", "plugin-fcfs-y1", "plugin-sjf-y1-aging@3",
                "plugin-sjf-d0", "plugin-sjf-d", "plugin-sjf-d2.5", "plugin-sjf-d30-y1"):
        with pytest.raises(ConfigError) as e:
            arm(bad)
        assert "\n" not in str(e.value)
