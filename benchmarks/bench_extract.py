"""Cost of feature extraction against a plain prefill of the same batch, and peak memory at N vs 4N prompts.

    .venv/bin/python benchmarks/bench_extract.py                       # embedded SmolLM2-135M, 2 threads
    .venv/bin/python benchmarks/bench_extract.py --batch 16 --tokens 256 --reps 3 --n 16

Timed variants (interleaved repetitions, since the machine is shared; median reported):
  prefill        model(..., logits_to_keep=1): what a serving engine's prefill computes
  prefill+logits model(...): transformers' default forward, logits at every position
  hidden         hidden states of every layer (31), last/mean pools (no entropy: no LM head over the prompt)
  features       hidden states of every layer (31) + entropy + last/mean/entropy pools
  features+attn  the same + attention importance of `--attn-layers` + attn pool + fused pools
Memory: `extract_features` of N and 4N prompts, each in a fresh process; peak RSS (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

TEXT = ("The committee reviewed the quarterly figures, asked for a breakdown by region, and noted that "
        "shipping delays in the north had pushed several orders into the next period. ")


def prompts(n: int, tokens: int) -> list[dict]:
    """n chat prompts of roughly `tokens` tokens each (lengths vary ±25% so batches need padding)."""
    out = []
    words = TEXT.split()
    for i in range(n):
        k = int(tokens * 0.75 * (0.75 + 0.5 * ((i * 37) % 11) / 10))
        body = " ".join(words[(i + j) % len(words)] for j in range(k))
        out.append({"id": f"b{i:05d}", "messages": [{"role": "user", "content": f"Q{i}: {body}"}]})
    return out


def load(threads: int):
    torch.set_num_threads(threads)
    from lengthpred.models.serving import load_causal_lm
    from lengthpred.models.specs import embedded_serving_spec

    return load_causal_lm(embedded_serving_spec())


def time_variants(args) -> None:
    from lengthpred.features import FeatureSettings
    from lengthpred.features.capture import PrefillCapture
    from lengthpred.features.extract import Plan, collate, extract_batch
    from lengthpred.prompting import encode_prompt

    model, tok = load(args.threads)
    seqs = [encode_prompt(tok, p["messages"]) for p in prompts(args.batch, args.tokens)]
    ids, mask = collate(seqs, tok.pad_token_id or 0, "left")
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    attn = "all" if args.attn_layers == "all" else tuple(int(x) for x in args.attn_layers.split(","))
    ed = args.entropy_dtype
    hidden = FeatureSettings(pools=("last", "mean"), fused=(), attn_layers=())
    plain = FeatureSettings(pools=("last", "mean", "entropy"), fused=(), attn_layers=attn, entropy_dtype=ed)
    full = FeatureSettings(pools=("last", "mean", "entropy", "attn"), fused=("mix0.5", "prod"), attn_layers=attn,
                           entropy_dtype=ed)

    def run_features(s):
        plan = Plan(s, model)
        with PrefillCapture(model, plan.hs_layers, plan.attn_layers, s.attn_chunk) as cap:
            cols, _ = extract_batch(model, plan, cap, ids, mask)
            {k: v.half() for k, v in cols.items()}

    variants = {
        "prefill": lambda: model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1),
        "prefill+logits": lambda: model(input_ids=ids, attention_mask=mask, position_ids=pos),
        "hidden": lambda: run_features(hidden),
        "features": lambda: run_features(plain),
        "features+attn": lambda: run_features(full),
    }
    wall: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    with torch.no_grad():
        variants["prefill"]()  # warm-up
        for _ in range(args.reps):
            for name, fn in variants.items():
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
    n_tok = int(mask.sum())
    print(f"batch {args.batch} prompts, {n_tok} real tokens (padded {ids.numel()}), {args.threads} threads, "
          f"{args.reps} interleaved reps (median), attention layers: {args.attn_layers}, "
          f"entropy in {args.entropy_dtype}")
    # CPU time of this process is what a shared machine distorts least; wall time is what a user waits
    for label, times in (("cpu", cpu), ("wall", wall)):
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in med.items():
            print(f"  {label:4s} {k:15s} {v:7.2f} s  ({n_tok / v:6.0f} tokens/s, {args.batch / v:5.2f} prompts/s)  "
                  f"runs: {', '.join(f'{x:.2f}' for x in times[k])}")
        for base in ("prefill", "prefill+logits"):
            print(f"  {label:4s} ratio vs {base:15s} hidden {med['hidden'] / med[base]:.3f}×   "
                  f"features {med['features'] / med[base]:.3f}×   "
                  f"features+attn {med['features+attn'] / med[base]:.3f}×")


def memory_child(args) -> None:
    from lengthpred.features import FeatureSettings, extract_features

    model, tok = load(args.threads)
    s = FeatureSettings(batch_size=args.batch, attn_layers="all")
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        extract_features(s, model, tok, prompts(args.mem, args.tokens), out_dir=Path(d), progress=False)
        dt = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"n": args.mem, "peak_mb": peak_mb, "seconds": dt}))


def memory(args) -> None:
    res = []
    for n in (args.n, 4 * args.n):
        cmd = [sys.executable, __file__, "--mem", str(n), "--tokens", str(args.tokens), "--batch", str(args.batch),
               "--threads", str(args.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        res.append(json.loads(out))
    a, b = res
    print(f"peak RSS extract_features (all layers, all pools, batch {args.batch}): N={a['n']}: {a['peak_mb']:.0f} MB "
          f"({a['seconds']:.1f} s), 4N={b['n']}: {b['peak_mb']:.0f} MB ({b['seconds']:.1f} s), "
          f"ratio {b['peak_mb'] / a['peak_mb']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256, help="approximate prompt length")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attn-layers", default="all", help="'all' or comma-separated decoder layer indices")
    ap.add_argument("--entropy-dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--n", type=int, default=16, help="N for the memory check (runs N and 4N)")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--mem", type=int, default=0, help=argparse.SUPPRESS)  # child process mode
    args = ap.parse_args()
    if args.mem:
        return memory_child(args)
    if not args.skip_timing:
        time_variants(args)
    if not args.skip_memory:
        memory(args)


if __name__ == "__main__":
    main()
