"""Useful tokens/s of each generation backend on the same prompts, and its ratio to the CPU's limit.

    .venv/bin/python benchmarks/bench_generate.py                       # cb vs static
    .venv-vllm/bin/python benchmarks/bench_generate.py --backends cb,static,vllm
    # the bench trace's settings: a stream of prompts that keeps vLLM's batch full
    VLLM_CPU_KVCACHE_SPACE=6 .venv-vllm/bin/python benchmarks/bench_generate.py --backends vllm-stream \
        --data bench --n-prompts 192 --samples 3 --max-new-tokens 512 --in-flight 160 \
        --engine-args '{"max_num_seqs": 128, "enforce_eager": false}'

Useful tokens = answer tokens up to (not counting) EOS; padding and post-EOS steps do not count.
The limit: useful tokens/s if every FLOP went to the model's forward pass, 2 x parameters FLOPs per
token at the matmul rate measured here on the same threads (`--gflops` to give your own).
Prompts: the first --n-prompts of data/splits/<data>/prompts (id-sorted), else a built-in list.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from lengthpred.generate import GenerationSettings
from lengthpred.generate.backends import BACKENDS
from lengthpred.models.serving import load_causal_lm
from lengthpred.models.specs import embedded_serving_spec
from lengthpred.paths import data_dir
from lengthpred.prompting import encode_prompt

BUILTIN = [
    "Write a short poem about the sea.", "What is 17*23? Explain step by step.",
    "Give me three tips for sleeping better.", "Summarise the plot of Hamlet in a paragraph.",
    "Write a Python function that reverses a string.", "Who was Ada Lovelace?",
    "Explain photosynthesis to a child.", "List five fruits and one fact about each.",
]


def prompts(n: int, tokenizer, data: str = "demo") -> list[list[int]]:
    d = data_dir() / "splits" / data / "prompts"
    if d.is_dir():
        import datasets

        ds = datasets.load_from_disk(str(d)).sort("id")
        msgs = [ds[i]["messages"] for i in range(min(n, len(ds)))]
    else:
        msgs = [[{"role": "user", "content": BUILTIN[i % len(BUILTIN)]}] for i in range(n)]
    return [encode_prompt(tokenizer, m, max_prompt_tokens=1024, overflow="truncate") for m in msgs]


def matmul_gflops(threads: int, size: int = 1024, reps: int = 20) -> float:
    """fp32 matmul rate on `threads` threads: the machine's useful FLOP ceiling for a small model."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * size**3 * reps / (time.perf_counter() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="cb,static")
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="demo", help="prompts from data/splits/<data>/prompts")
    ap.add_argument("--in-flight", type=int, default=160, help="vllm-stream: prompts kept in the engine")
    ap.add_argument("--engine-args", default="{}", help="vllm: engine keyword arguments as JSON")
    ap.add_argument("--gflops", type=float, default=None, help="the machine's matmul GFLOP/s (else measured)")
    args = ap.parse_args()
    gflops = args.gflops or matmul_gflops(args.threads)
    torch.set_num_threads(args.threads)
    spec = embedded_serving_spec()
    model, tok = load_causal_lm(spec)
    limit = gflops * 1e9 / (2 * sum(p.numel() for p in model.parameters()))
    print(f"limit: {limit:.0f} useful tok/s ({gflops:.0f} GFLOP/s fp32 matmul on {args.threads} threads)")
    rows = prompts(args.n_prompts, tok, args.data)
    keys = [str(i) for i in range(len(rows))]
    results = {}
    for name in args.backends.split(","):
        backend = "vllm" if name.startswith("vllm") else name
        s = GenerationSettings(backend=backend, num_samples=args.samples, max_new_tokens=args.max_new_tokens,
                               seed=0, engine_args=json.loads(args.engine_args) if backend == "vllm" else None)
        if backend == "vllm":
            from lengthpred.models.serving import _checkpoint_dir

            t_start = time.perf_counter()
            be = BACKENDS.get(backend)(_checkpoint_dir(spec), tok, s, dtype="bfloat16", max_model_len=2048)
            print(f"vllm engine start: {time.perf_counter() - t_start:.1f} s (not counted)")
        else:
            be = BACKENDS.get(name)(model, tok, s)
        t0 = time.perf_counter()
        if name == "vllm-stream":
            done = dict(be.stream(zip(keys, rows, strict=True), args.in_flight))
            out = [done[k] for k in keys]
        else:
            out = be.generate(rows, keys, seed=0)
        dt = time.perf_counter() - t0
        useful = sum(len(x.token_ids) for per in out for x in per)
        capped = sum(x.finish_reason == "length" for per in out for x in per)
        results[name] = useful / dt
        print(f"{name:7s} {len(rows) * args.samples:4d} answers  {useful:6d} useful tokens  {capped:3d} capped  "
              f"{dt:7.1f} s  {useful / dt:7.1f} tok/s  {useful / dt / limit:.2f} of the limit", flush=True)
    if "static" in results:
        for name, v in results.items():
            if name != "static":
                print(f"ratio {name}/static: {v / results['static']:.2f}x")


if __name__ == "__main__":  # vLLM's spawned engine needs the guard
    main()
