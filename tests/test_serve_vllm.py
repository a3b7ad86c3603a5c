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
