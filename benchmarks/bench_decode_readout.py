"""Added cost of refining while decoding (issue 27, item 5): reading the layer-20 state at a checkpoint and
running the remaining-length readout on it, against the decode step it rides on.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_decode_readout.py --batch 1 16 --steps 64 --reps 3

SmolLM2-135M-Instruct (transformers, KV cache, CPU) decodes `--steps` tokens after a `--prompt-tokens` prompt for
each batch size, three ways, in alternating order, `--reps` times, the fastest kept (the cores are shared):
- plain: no hook;
- hooked: a forward hook on decoder layer 19 (hidden_states index 20) that copies the last position's state of
  every sequence [B, d] every k-th step (k = `--every`) and does nothing on the other steps;
- read: the readout on that copy: the linear head (standardise, dot, expm1: the numpy path, and sklearn's
  `LinearHead.predict` with its input validation) and TRAIL's probe MLP (Linear(d+1, 512)-ReLU-Linear(512, 10)).
Prints per checkpoint the hooked run's extra time (hooked − plain over the checkpoints: noisy on shared cores),
the hook call itself at a checkpoint (copying [B, d], timed alone) and each readout's time, and the overhead per
generated token at k (hook call + readout, every k-th step) as a share of the plain step time.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from lengthpred.heads.binned import build_mlp
from lengthpred.heads.linear import LinearHead
from lengthpred.models.serving import load_causal_lm
from lengthpred.models.specs import embedded_serving_spec

LAYER = 20


def decode(model, prompt: torch.Tensor, steps: int) -> float:
    """Seconds for `steps` cached decode steps after the prompt's prefill (prefill not counted)."""
    with torch.inference_mode():
        out = model(prompt, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        return time.perf_counter() - t0


def best(fn, reps: int) -> float:
    return min(fn() for _ in range(reps))


def per_call(fn, n: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def measure(model, layer, bsz: int, args, lin: LinearHead, mlp: torch.nn.Module) -> str:
    """One table row: decode `args.steps` tokens for a batch of `bsz`, plain and hooked, then time the readouts."""
    prompt = torch.randint(100, 40000, (bsz, args.prompt_tokens))
    state: dict[str, torch.Tensor] = {}
    step = [0]

    def hook(_m, _a, out):
        step[0] += 1
        if step[0] % args.every == 0:
            h = out[0] if isinstance(out, tuple) else out
            state["x"] = h[:, -1].float().clone()

    plain, hooked = [], []
    for _ in range(0 if args.readout_only else args.reps):  # alternating, so drift in the shared cores hits both alike
        plain.append(decode(model, prompt, args.steps))
        handle = layer.register_forward_hook(hook)
        try:
            hooked.append(decode(model, prompt, args.steps))
        finally:
            handle.remove()
    t_plain = min(plain, default=float("nan")) / args.steps
    hook_per_ck = max(min(hooked, default=float("nan")) - min(plain, default=float("nan")), 0.0) / max(
        args.steps // args.every, 1)
    x = torch.cat([state.get("x", torch.randn(bsz, model.config.hidden_size)), torch.full((bsz, 1), 3.0)], dim=1)
    xn = x.numpy().astype(np.float64)
    mean, scale, coef, b = lin.scaler_.mean_, lin.scaler_.scale_, lin.coef_, lin.intercept_
    centres = torch.linspace(0, 512, 10)

    def probe():
        with torch.inference_mode():
            return mlp(x).softmax(-1) @ centres

    fake = (torch.randn(bsz, 1, model.config.hidden_size),)
    step[0] = -1  # every call below a checkpoint step

    def hook_call():
        step[0] = args.every - 1
        hook(None, None, fake)

    t_hook = per_call(hook_call, 2000)
    t_np = per_call(lambda: np.expm1(((xn - mean) / scale) @ coef + b), 2000)
    t_sk = per_call(lambda: lin.predict(xn), 300)
    t_pr = per_call(probe, 1000)

    def share(r: float) -> float:
        return 100 * (t_hook + r) / (args.every * t_plain)

    return (f"| {bsz} | {1e3 * t_plain:.2f} | {1e6 * hook_per_ck:.0f} | {1e6 * t_hook:.0f} | {1e6 * t_np:.0f} | {1e6 * t_sk:.0f} | "
            f"{1e6 * t_pr:.0f} | {share(t_np):.4f} | {share(t_pr):.4f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--readout-only", action="store_true", help="skip the decode loop: only the hook call and readouts")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_causal_lm(embedded_serving_spec())
    d = model.config.hidden_size
    rng = np.random.default_rng(0)
    lin = LinearHead(alpha=10.0).fit(rng.normal(size=(500, d + 1)), rng.integers(1, 500, 500).astype(float))
    mlp = build_mlp(d + 1, 512, 10, layer_norm=False, dropout=0.0).eval()
    print(f"load average {os.getloadavg()[0]:.1f}; torch threads {args.threads}; k = {args.every}")
    print("| batch | plain step (ms) | hooked − plain per checkpoint (µs) | hook call at a checkpoint (µs) | linear numpy (µs) | linear sklearn (µs) "
          "| probe (µs) | overhead per token at k, linear numpy (%) | probe (%) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for bsz in args.batch:
        print(measure(model, model.model.layers[LAYER - 1], bsz, args, lin, mlp))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
