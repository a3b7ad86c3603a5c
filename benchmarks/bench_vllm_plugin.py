"""What the plugin costs a server: stock `vllm serve` against the plugin with prediction, updates and FCFS order,
on identical work (vLLM's own client, `vllm bench serve`), and the plugin's own per-request cost beside its
prefill step. Run on quiet cores:

    .venv/bin/python benchmarks/bench_vllm_plugin.py --readout data/reference/smollm2-135m/readout_bench.safetensors

Workload: `--requests` validation prompts of the bench data, all at once, each generating exactly `--tokens`
tokens (ignore_eos: identical work under both arms), on the embedded model with max_num_seqs 4. The arms alternate
ABBA over `--pairs` pairs. Per run: vLLM's request and output throughput and median TPOT; per pair, plugin/stock.
From the plugin's counters: the readout's predict and RLS update time per request, the model process's capture
time per prefill step, and the median prefill step the scheduler saw, so the per-request cost is a share of one
prefill step. Goals (issue 58): throughput and TPOT within 2% of stock; predict + update + capture within 1% of a
prefill step. Writes a JSON summary beside the runs (`--out`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from lengthpred.machine import git_commit, machine
from lengthpred.paths import CONF_DIR, REPO_ROOT
from lengthpred.serve.vllm_bench import ARMS, Server, ServerSpec, Workload, run_bench
from lengthpred.serve.vllm_bench_campaign import write_dataset

ENV = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_WAIT_POLICY": "ACTIVE"}


def prompts(n: int) -> tuple[dict[str, str], list[str], str, str]:
    from hydra.utils import instantiate

    import lengthpred.cli  # noqa: F401 (registers the config resolvers and head defaults every script composes with)
    from lengthpred.data import load_prompts, load_splits
    from lengthpred.models import load_tokenizer
    from lengthpred.stages.serve import split_ids
    from lengthpred.stages.serve_bench import prompt_texts

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=bench", "logger=disabled"])
    ids = split_ids(load_splits(cfg.data), "val")[:n]
    texts = prompt_texts(load_tokenizer(instantiate(cfg.model)), load_prompts(cfg.data), ids,
                         int(cfg.model.max_context) - 512)
    return texts, ids, str(cfg.model.cache_dir), str(cfg.model.name)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--readout", type=Path, required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--venv", type=Path, default=REPO_ROOT / ".venv-vllm")
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-vllm-plugin-")))
    a = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    texts, ids, model_dir, name = prompts(a.requests)
    data = write_dataset(a.out / "prompts.jsonl", ids, texts)
    spec = ServerSpec(a.venv, model_dir, served_name=name, max_num_seqs=4, port=8041, env=ENV,
                      extra_args=("--enforce-eager",))
    w = Workload(data, len(ids), float("inf"), 1.0, seed=0, max_tokens=a.tokens)
    runs = []
    for k in range(a.pairs):
        order = ["stock-fcfs", "plugin-fcfs"] if k % 2 == 0 else ["plugin-fcfs", "stock-fcfs"]
        for arm_name in order:
            arm = ARMS[arm_name]
            stem = a.out / f"p{k}_{arm_name}"
            ckpt = a.out / f"{stem.name}.live.safetensors"
            with Server(spec, arm, a.readout if arm.plugin else None, a.out / f"{stem.name}.serve.log",
                        checkpoint=ckpt) as srv:
                srv.warm_up()
                res = run_bench(spec, _ignore_eos(w), stem.with_suffix(".json"), model_dir,
                                a.out / f"{stem.name}.bench.log")
                if arm.plugin:
                    from lengthpred.serve.vllm_bench_campaign import _await_stats

                    _await_stats(ckpt.with_suffix(".stats.json"), len(ids) + 1)
            row = {"pair": k, "arm": arm_name, "throughput": res["request_throughput"],
                   "output_throughput": res["output_throughput"], "tpot_median_ms": res["median_tpot_ms"]}
            if arm.plugin:
                row |= {"plugin": json.loads(ckpt.with_suffix(".stats.json").read_text())}
            runs.append(row)
            print(json.dumps(row), flush=True)
    summary = summarise(runs)
    setup = {"pairs": a.pairs, "requests": a.requests, "tokens": a.tokens, "machine": machine() | {"load_at_start": load0},
             "commit": git_commit()}
    with gzip.open(a.out / "summary.json.gz", "wt") as f:
        json.dump({"runs": runs, "summary": summary, "setup": setup}, f)
    print(json.dumps(summary, indent=2))
    return 0


def _ignore_eos(w: Workload) -> Workload:
    """Identical work under both arms: every request generates exactly max_tokens (vllm bench serve --ignore-eos)."""
    return Workload(w.dataset, w.n_requests, w.request_rate, w.burstiness, w.seed, w.max_tokens, w.temperature,
                    w.top_p, ignore_eos=True)


def summarise(runs: list[dict]) -> dict:
    pairs = sorted({r["pair"] for r in runs})
    by = {(r["pair"], r["arm"]): r for r in runs}
    ratio = {m: [by[(k, "plugin-fcfs")][m] / by[(k, "stock-fcfs")][m] for k in pairs]
             for m in ("throughput", "output_throughput", "tpot_median_ms")}
    plug = [by[(k, "plugin-fcfs")]["plugin"] for k in pairs]
    per_request = [p["predict_ms_mean"] + p["update_ms_mean"] + p["capture_ms_per_prefill_step"] for p in plug]
    step = [p["prefill_step_ms_median"] for p in plug]
    from lengthpred.metrics import sign_flip_p

    return {
        "plugin_over_stock": {m: {"median": statistics.median(v), "min": min(v), "max": max(v),
                                  "pairs_above_1": sum(x > 1 for x in v),
                                  "sign_flip_p": sign_flip_p(np.log(np.asarray(v, float)))} for m, v in ratio.items()},
        "per_request_ms": {"predict": statistics.median(p["predict_ms_mean"] for p in plug),
                           "update": statistics.median(p["update_ms_mean"] for p in plug),
                           "capture_per_prefill_step": statistics.median(p["capture_ms_per_prefill_step"] for p in plug)},
        "prefill_step_ms_median": statistics.median(step),
        "per_request_share_of_prefill_step": statistics.median(c / s for c, s in zip(per_request, step, strict=True)),
        "yields": sum(p["yields"] for p in plug), "kv_preempted": sum(p["kv_preempted"] for p in plug),
    }


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
