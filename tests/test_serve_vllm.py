"""A short real replay on vLLM, run in the vLLM venv (the PROBE below); skipped, saying why, when that venv
or the embedded model's checkpoint is missing.

Three requests arrive together on one slot (max_num_seqs 1) under the oracle policy, plus one whose prompt
is too long and one with max_tokens 0: the engine must serve shortest first, produce exactly the replayed
lengths, time every step, and count both bad requests as rejected."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lengthpred.paths import REPO_ROOT, data_dir

VENV_PY = REPO_ROOT / ".venv-vllm" / "bin" / "python"
CKPT = data_dir() / "models" / "smollm2-135m"
PROBE = """
import json
import sys

from lengthpred.serve import NoPredictor, ServeRequest, WallClock, get_policy, replay
from lengthpred.serve.vllm_engine import VLLMEngine

eng = VLLMEngine(sys.argv[1], max_model_len=512, max_num_seqs=1, max_num_batched_tokens=512)
reqs = [ServeRequest("a", "pa", [1] + [42] * 30, 6, 0.0, 6.0), ServeRequest("b", "pb", [1] + [43] * 20, 2, 0.0, 2.0),
        ServeRequest("c", "pc", [1] + [44] * 10, 4, 0.0, 4.0),
        ServeRequest("long", "pl", [1] * 600, 4, 0.0, 4.0), ServeRequest("zero", "pz", [1] * 5, 0, 0.0, 0.0)]
run = replay(reqs, eng, get_policy("oracle"), NoPredictor(), WallClock())
r = run.requests
print(json.dumps({
    "order": r[r["status"] == "finished"].sort_values("first_token")["rid"].tolist(),
    "status": dict(zip(r["rid"], r["status"])),
    "reasons": dict(zip(r["rid"], r["reason"])),
    "output_tokens": {k: int(v) for k, v in zip(r["rid"], r["output_tokens"])},
    "steps": run.steps[["batch", "prefill_tokens", "ctx_tokens"]].values.tolist(),
    "limits": [eng.limits.max_batch, eng.limits.kv_blocks, eng.limits.block_size],
}))
"""


def needs_vllm(test):
    """Marks a test that runs a probe in the vLLM venv: skipped, saying why, without the venv or the checkpoint."""
    marks = [pytest.mark.integration, pytest.mark.slow,
             pytest.mark.skipif(not VENV_PY.exists(), reason="no vLLM venv at .venv-vllm (create it with `make serve-setup`)"),
             pytest.mark.skipif(not (CKPT / "config.json").is_file(), reason="no embedded model checkpoint at "
                                "data/models/smollm2-135m (run scripts/prepare_model.py)")]
    for m in marks:
        test = m(test)
    return test


def run_probe(probe: str) -> dict:
    """Run `probe` (Python source; argv[1] = the checkpoint) in the vLLM venv; its last stdout line as JSON."""
    env = {**os.environ, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run([str(VENV_PY), "-c", probe, str(CKPT)],
                          capture_output=True, text=True, timeout=540, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_vllm
def test_real_replay_serves_in_priority_order_and_counts_rejections():
    out = run_probe(PROBE)
    assert out["order"] == ["b", "c", "a"]  # one slot, oracle priority: shortest replayed length first
    assert out["status"]["long"] == "rejected" and out["status"]["zero"] == "rejected"
    assert out["output_tokens"] == {"a": 6, "b": 2, "c": 4, "long": 0, "zero": 0}  # ignore_eos: exact lengths
    first = out["steps"][0]
    assert first[0] == 1 and first[1] == 21  # the first step prefilled b's 21 prompt tokens
    assert out["limits"][0] == 1 and out["limits"][1] > 0


PROBE_ORDER = """
import json
import sys

from transformers import AutoTokenizer

from lengthpred.serve import NoPredictor, ServeRequest, WallClock, get_policy, replay
from lengthpred.serve.vllm_engine import VLLMEngine

eng = VLLMEngine(sys.argv[1], max_model_len=512, max_num_seqs=1, max_num_batched_tokens=512, prefix_caching=True,
                 engine_args={"block_size": 32})
# aging: the waiting heap re-keyed before the first step reverses the order the priorities at `add` gave
for k, rid in enumerate(["x", "y", "z"]):
    eng.add(rid, [1] + [40 + k] * 12, 3, k + 1, 1000.0 + k)
eng.reprioritize({"x": 30, "y": 20, "z": 10}.__getitem__)
first = []
while eng.has_unfinished():
    info = eng.step()
    first += [r for r in info.new_tokens if r not in first]
# prefill-first FCFS: two phases, every answer its exact length
reqs = [ServeRequest(f"r{i}", f"p{i}", [1] + [50 + i] * (20 + 7 * i), 5 + i, 0.0, 5.0 + i) for i in range(4)]
pf = replay(reqs, eng, get_policy("fcfs-pf"), NoPredictor(), WallClock()).requests
# natural answers: a chat prompt ends at the model's own end of sequence, the same under a seed drawn from it
tok = AutoTokenizer.from_pretrained(sys.argv[1])
ids = tok.apply_chat_template([{"role": "user", "content": "Describe a cat in one paragraph."}],
                              add_generation_prompt=True)
ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # newer transformers return a BatchEncoding
eng.natural_eos = True
nat = [replay([ServeRequest(f"n{k}", "cat", list(ids), 400, 0.0, 10.0)], eng, get_policy("fcfs"), NoPredictor(),
              WallClock()).requests.iloc[0] for k in range(2)]
print(json.dumps({"order": first, "pf_tokens": pf["output_tokens"].tolist(), "pf_target": pf["target_tokens"].tolist(),
                  "pf_status": pf["status"].tolist(), "pf_split": int(pf["split"].sum()),
                  "natural": [int(r["output_tokens"]) for r in nat], "natural_target": [int(r["target_tokens"]) for r in nat]}))
"""


@needs_vllm
def test_real_engine_reorders_waiting_requests_serves_prefill_first_and_stops_at_natural_eos():
    out = run_probe(PROBE_ORDER)
    assert out["order"] == ["z", "y", "x"]  # re-keyed: the priorities at add (x first) no longer decide
    assert out["pf_status"] == ["finished"] * 4 and out["pf_tokens"] == out["pf_target"] == [5, 6, 7, 8]
    assert out["pf_split"] >= 1  # one slot: later decodes yielded to the arrival order
    a, b = out["natural"]
    # an open-ended answer ends at its own EOS below the cap, long enough that two unseeded samples would rarely
    # end at the same length: equal lengths say the seed drawn from the prompt samples it alike
    assert 32 <= a < 400 and a == b  # (about 100 tokens here)
    assert out["natural_target"] == out["natural"]  # the simulator replays the length it ended at
