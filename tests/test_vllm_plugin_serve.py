"""The plugin inside a real `vllm serve` (vLLM's default process layout: API server, engine core and worker in three
processes) on the embedded model, driven through the OpenAI API.

Needs the vLLM venv (`make serve-setup`), the embedded model's checkpoint (scripts/prepare_model.py) and the committed
bench readout. Without them the tests skip saying why, except under CI=true, where .ci/run builds all three and a
skip is a failure (`needs_vllm_server`).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from lengthpred.online.readout_file import ModelIdentity, read_readout, write_readout
from lengthpred.paths import REPO_ROOT, data_dir
from lengthpred.serve.vllm_bench import Arm, Server, ServerSpec

VENV = REPO_ROOT / ".venv-vllm"
CKPT = data_dir() / "models" / "smollm2-135m"
READOUT = REPO_ROOT / "data" / "reference" / "smollm2-135m" / "readout_bench.safetensors"
ENV = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
# prompts whose answers the bench readout ranks far apart (a word, a list, an essay)
PROMPTS = ["Reply with one word: yes or no. Is water wet?",
           "What is 2 + 3? Answer with the number only.",
           "Name the capital of France.",
           "List five fruits, one per line.",
           "Write a detailed essay of at least 800 words on the history of the printing press in Europe.",
           "Write a long story about a dragon who learns to paint, with many chapters and dialogue."]


def _missing() -> str | None:
    if not (VENV / "bin" / "vllm").exists():
        return "no vLLM venv at .venv-vllm (create it with `make serve-setup`)"
    if not (CKPT / "config.json").is_file():
        return "no embedded model checkpoint at data/models/smollm2-135m (run scripts/prepare_model.py)"
    if not READOUT.is_file():
        return f"no readout at {READOUT}"
    return None


def needs_vllm_server(test):
    why = _missing()
    marks = [pytest.mark.integration, pytest.mark.slow]
    if why and os.environ.get("CI") != "true":
        marks.append(pytest.mark.skip(reason=why))
    for m in marks:
        test = m(test)
    return test


@pytest.fixture(scope="module")
def spec() -> ServerSpec:
    why = _missing()
    if why:
        pytest.fail(f"CI=true but {why}: .ci/run builds it")
    return ServerSpec(VENV, str(CKPT), served_name="smollm2", max_num_seqs=1, port=8047, env=ENV,
                      extra_args=("--enforce-eager",))


def _chat(text: str) -> str:
    from lengthpred.models import serving_tokenizer

    return serving_tokenizer().apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                   tokenize=False)


def _complete(spec: ServerSpec, prompt: str, max_tokens: int, out: dict, key: str) -> None:
    body = json.dumps({"model": spec.served_name, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(spec.base_url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out[key] = json.loads(r.read())


def _send_together(spec: ServerSpec, prompts: list[str], max_tokens: int) -> dict:
    out: dict = {}
    threads = [threading.Thread(target=_complete, args=(spec, p, max_tokens, out, str(i))) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _log(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _wait_stats(path: Path, finished: int) -> dict:
    import time

    for _ in range(120):
        if path.is_file():
            s = json.loads(path.read_text())
            if s["finished"] >= finished:
                return s
        time.sleep(0.5)
    raise AssertionError(f"no stats with {finished} finished requests at {path}")


@needs_vllm_server
def test_every_request_is_predicted_served_in_predicted_order_and_teaches_the_readout(spec, tmp_path):
    ckpt, reqlog = tmp_path / "live.safetensors", tmp_path / "requests.jsonl"
    plugin = Arm("sjf", {"policy": "sjf", "checkpoint_every": 4})
    texts = [_chat(p) for p in PROMPTS]
    with Server(spec, plugin, READOUT, tmp_path / "serve.log", checkpoint=ckpt, request_log=reqlog):
        answers = _send_together(spec, texts, max_tokens=24)
        stats = _wait_stats(ckpt.with_suffix(".stats.json"), len(PROMPTS))
        # the same prompt again: vLLM's prefix cache holds it whole and recomputes one token, for which the model
        # sends no state; the scheduler reuses the row of the identical prompt
        _complete(spec, texts[0], 4, answers, "again")
        _wait_stats(ckpt.with_suffix(".stats.json"), len(PROMPTS) + 1)
    again = _log(reqlog)[-1]
    assert again["predicted"] is not None and again["output_tokens"] == 4
    assert sorted(answers) == sorted([str(i) for i in range(len(PROMPTS))] + ["again"])
    assert all(a["usage"]["completion_tokens"] == 24 for k, a in answers.items() if k != "again")
    log = _log(reqlog)[:-1]
    assert again["prompt_hash"] in {x["prompt_hash"] for x in log}
    assert len(log) == len(PROMPTS) and all(x["predicted"] is not None for x in log), log
    assert stats["predicted"] == len(PROMPTS) and stats["unpredictable"] == 0 and stats["kv_preempted"] == 0
    # one slot: every request is prefilled on arrival, then the decodes run one at a time, shortest predicted first
    first_done = min(x["finished_at"] for x in log)
    assert all(x["arrival"] < first_done for x in log), "a request arrived after the first finished: no contest"
    order = [x["predicted"] for x in sorted(log, key=lambda x: x["finished_at"])]
    assert order == sorted(order) and len(set(order)) == len(order), order
    assert stats["yields"] > 0  # decodes gave their slot to new prefills and kept their KV (no preemption)
    # the prediction is the readout on the engine's own prefill state: compare with the same readout on the
    # float32 Hugging Face model's state for the same token ids
    readout = read_readout(READOUT)
    from lengthpred.models import serving_tokenizer
    from lengthpred.models.serving import load_causal_lm
    from lengthpred.models.specs import embedded_serving_spec
    from lengthpred.serve.featurize import PrefillFeaturizer

    model, _ = load_causal_lm(embedded_serving_spec())
    feat = PrefillFeaturizer(model, readout.layer)
    tok = serving_tokenizer()
    from lengthpred.vllm_plugin.request_log import prompt_hash

    by_prompt = {x["prompt_hash"]: x["predicted"] for x in log}
    for text in texts:
        ids = tok(text)["input_ids"]
        hf = float(readout.estimator.predict(feat(ids)[None])[0])
        assert by_prompt[prompt_hash(ids)] == pytest.approx(hf, rel=0.1, abs=2.0), (text[-60:], hf)
    # completions updated the readout; the checkpoint holds every update, and a restart resumes from it
    live = read_readout(ckpt)
    assert live.estimator.n_updates_ == len(PROMPTS) + 1
    assert stats["updates"] == len(PROMPTS)
    assert not np.allclose(live.estimator.theta_, readout.estimator.theta_)
    with Server(spec, plugin, READOUT, tmp_path / "serve2.log", checkpoint=ckpt, request_log=reqlog):
        pass
    assert f"{len(PROMPTS) + 1} updates so far (resumed from its checkpoint)" in (tmp_path / "serve2.log").read_text()


@needs_vllm_server
def test_parked_requests_give_their_kv_back_when_memory_runs_short(spec, tmp_path):
    ckpt, reqlog = tmp_path / "live.safetensors", tmp_path / "requests.jsonl"
    small = ServerSpec(spec.venv, spec.model, served_name=spec.served_name, max_num_seqs=2, port=spec.port,
                       env=spec.env, extra_args=(*spec.extra_args, "--num-gpu-blocks-override", "12",
                                                 "--block-size", "32", "--max-model-len", "256"))
    texts = [_chat(p) for p in PROMPTS]
    with Server(small, Arm("sjf", {"policy": "sjf"}), READOUT, tmp_path / "serve.log", checkpoint=ckpt,
                request_log=reqlog):
        answers = _send_together(small, texts, max_tokens=64)
        stats = _wait_stats(ckpt.with_suffix(".stats.json"), len(PROMPTS))
    assert all(a["usage"]["completion_tokens"] == 64 for a in answers.values())
    assert stats["kv_preempted"] > 0, stats
    assert stats["predicted"] == len(PROMPTS)


@needs_vllm_server
def test_no_slot_stays_empty_for_a_new_request_the_step_budget_cannot_admit(spec, tmp_path):
    # 32 tokens a step: each prompt is prefilled in chunks that can spend the whole step, so a slot kept for a new
    # request vLLM then cannot admit would stay empty while a parked decode waits
    ckpt = tmp_path / "live.safetensors"
    tight = ServerSpec(spec.venv, spec.model, served_name=spec.served_name, max_model_len=512, max_num_seqs=2,
                       port=spec.port, env=spec.env, extra_args=(*spec.extra_args, "--max-num-batched-tokens", "32"))
    texts = [_chat(p) for p in PROMPTS]
    with Server(tight, Arm("sjf", {"policy": "sjf"}), READOUT, tmp_path / "serve.log", checkpoint=ckpt):
        answers = _send_together(tight, texts, max_tokens=16)
        stats = _wait_stats(ckpt.with_suffix(".stats.json"), len(PROMPTS))
    assert all(a["usage"]["completion_tokens"] == 16 for a in answers.values())
    assert stats["yields"] > 0 and stats["idle_slots"] == 0, stats


@needs_vllm_server
@pytest.mark.parametrize("case", ["missing", "other_model", "bad_option"])
def test_a_bad_readout_or_option_stops_the_server_at_start_with_one_line(spec, tmp_path, case):
    readout, opts, want = READOUT, {"policy": "sjf"}, ""
    if case == "missing":
        readout, want = tmp_path / "nope.safetensors", "lengthpred: readout file"
    elif case == "other_model":
        r = read_readout(READOUT)
        readout = write_readout(tmp_path / "other.safetensors", r.estimator,
                                ModelIdentity("other", r.identity.architecture, r.hidden_size, 24), layer=r.layer)
        want = "the served model smollm2 has layer count 30"
    else:
        opts, want = {"policy": "lifo"}, "lengthpred.policy='lifo': valid: fcfs, sjf, srpt"
    from lengthpred.errors import ModelError

    with pytest.raises(ModelError, match="exited with"):
        with Server(spec, Arm("x", opts), readout, tmp_path / "serve.log", checkpoint=tmp_path / "c.safetensors",
                    start_timeout_s=300):
            pass
    text = (tmp_path / "serve.log").read_text()
    assert want in text, text[-2000:]
