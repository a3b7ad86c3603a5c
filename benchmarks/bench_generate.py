"""Useful tokens/s of each generation backend on the same prompts, in one run (issue 4's speed target:
continuous batching ≥ 2× static-batch `generate` on 2 CPU cores with the embedded model).

    .venv/bin/python benchmarks/bench_generate.py                       # cb vs static
    .venv-vllm/bin/python benchmarks/bench_generate.py --backends cb,static,vllm

Useful tokens = answer tokens up to (not counting) EOS; padding and post-EOS steps do not count.
Prompts: the first --n-prompts of data/splits/demo/prompts (id-sorted), else a built-in list.
"""

from __future__ import annotations

import argparse
import time

import torch

from lengthpred.generate import BACKENDS, GenerationSettings
from lengthpred.models.serving import load_causal_lm
from lengthpred.models.specs import embedded_serving_spec
from lengthpred.paths import DATA_DIR
from lengthpred.prompting import encode_prompt

BUILTIN = [
    "Write a short poem about the sea.", "What is 17*23? Explain step by step.",
    "Give me three tips for sleeping better.", "Summarise the plot of Hamlet in a paragraph.",
    "Write a Python function that reverses a string.", "Who was Ada Lovelace?",
    "Explain photosynthesis to a child.", "List five fruits and one fact about each.",
]


def prompts(n: int, tokenizer) -> list[list[int]]:
    d = DATA_DIR / "splits" / "demo" / "prompts"
    if d.is_dir():
        import datasets

        ds = datasets.load_from_disk(str(d)).sort("id")
        msgs = [ds[i]["messages"] for i in range(min(n, len(ds)))]
    else:
        msgs = [[{"role": "user", "content": BUILTIN[i % len(BUILTIN)]}] for i in range(n)]
    return [encode_prompt(tokenizer, m, max_prompt_tokens=1024, overflow="truncate") for m in msgs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="cb,static")
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = embedded_serving_spec()
    model, tok = load_causal_lm(spec)
    rows = prompts(args.n_prompts, tok)
    keys = [str(i) for i in range(len(rows))]
    results = {}
    for name in args.backends.split(","):
        s = GenerationSettings(backend=name, num_samples=args.samples, max_new_tokens=args.max_new_tokens, seed=0)
        if name == "vllm":
            from lengthpred.models.serving import _checkpoint_dir

            t_start = time.perf_counter()
            be = BACKENDS.get(name)(_checkpoint_dir(spec), tok, s, dtype="bfloat16", max_model_len=2048)
            print(f"vllm engine start: {time.perf_counter() - t_start:.1f} s (not counted)")
        else:
            be = BACKENDS.get(name)(model, tok, s)
        t0 = time.perf_counter()
        out = be.generate(rows, keys, seed=0)
        dt = time.perf_counter() - t0
        useful = sum(len(x.token_ids) for per in out for x in per)
        capped = sum(x.finish_reason == "length" for per in out for x in per)
        results[name] = useful / dt
        print(f"{name:7s} {len(rows) * args.samples:4d} answers  {useful:6d} useful tokens  {capped:3d} capped  "
              f"{dt:7.1f} s  {useful / dt:7.1f} tok/s", flush=True)
    if "static" in results:
        for name, v in results.items():
            if name != "static":
                print(f"ratio {name}/static: {v / results['static']:.2f}x")


if __name__ == "__main__":  # vLLM's spawned engine needs the guard
    main()
