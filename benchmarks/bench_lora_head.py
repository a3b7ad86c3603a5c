"""What the lora head costs on the real serving model, against a plain prefill of the same prompts (issue 61).

On `--n` bench train prompts (the prepared bench splits), with `--threads` torch threads:
- plain prefill: the whole serving model, no gradients (what a server pays per prompt anyway);
- prediction: the prompt through the adapted model up to `--layer` (what the lora head adds per request);
- training: the frozen layers once per prompt, then one epoch of the adapted layers forward and backward,
  as `LoraHead.fit` runs them (tokens/s counts prompt tokens per second of each part).
Refuses to time while /tmp/QUIET exists (another job needs quiet cores) and prints the load average around each
part, since a shared machine makes any timing an upper bound:

    .venv/bin/python benchmarks/bench_lora_head.py --n 96 --threads 2 --lora-layers 4 8 \
        --out docs/results/data/t6-costs/lora_head_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

QUIET = Path("/tmp/QUIET")


def train_set(overrides: Sequence[str] = ("experiment=bench", "head=lora")) -> tuple[list[list[dict]], np.ndarray, Any]:
    """The in-domain train prompts (one chat each), their targets, and the config they come from (`overrides`)."""
    from hydra import compose, initialize_config_dir

    import lengthpred.cli  # noqa: F401  (config resolvers)
    from lengthpred.heads.assemble import indomain_ids
    from lengthpred.paths import REPO_ROOT
    from lengthpred.stages.train import load_stage_inputs

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["logger=disabled", *overrides])
    data = load_stage_inputs(cfg)
    train = data.labeled(indomain_ids(data.splits)["train"], "train")
    return list(train.inputs.messages), np.asarray(train.y), cfg


def prompts(n: int) -> tuple[list[list[dict]], np.ndarray]:
    X, y, _ = train_set()
    rows = np.random.default_rng(0).choice(len(X), size=min(n, len(X)), replace=False)
    return [X[i] for i in rows], y[rows]


def timed(label: str, fn, tokens: int, results: list[dict], **info) -> None:
    if QUIET.exists():
        raise SystemExit(f"{QUIET} exists: not timing {label} (another job needs quiet cores)")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    fn()
    secs = time.perf_counter() - t0
    rec = {"part": label, "seconds": round(secs, 2), "tokens": tokens, "tokens_per_s": round(tokens / secs, 1),
           "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2), **info}
    results.append(rec)
    print(json.dumps(rec), flush=True)


def bench_one(X: list, y: np.ndarray, threads: int, depth: int, layer: int, batch_size: int,
              results: list[dict]) -> None:
    """The four parts for one thread count and adapted depth."""
    from lengthpred.heads.lora import FROZEN, LoraHead
    from lengthpred.models.partial import right_pad, states

    torch.set_num_threads(threads)
    FROZEN.clear()
    head = LoraHead(layer=layer, lora_layers=depth, epochs=1, batch_size=batch_size, n_threads=threads, progress=False)
    ids = head._inputs(X)
    tokens = int(sum(map(len, ids)))
    head._build_for_fit()
    head._fit_targets(y)
    dec = head.encoder_
    n_layers = len(dec.layers)
    pad = head._tokenizer().pad_token_id or 0
    info = {"threads": threads, "lora_layers": depth, "layer": layer, "prompts": len(ids)}

    by_length = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # as the head batches: little padding

    def full_prefill() -> None:  # the serving model's own prefill, every layer, in the same length-sorted batches
        with torch.no_grad():
            for k in range(0, len(by_length), 16):
                t, m = right_pad([ids[i] for i in by_length[k:k + 16]], pad)
                states(dec, t, m, 0, n_layers)

    timed("plain prefill (all layers)", full_prefill, tokens, results, **info)
    frozen: list = []
    timed("training: frozen layers once, and the warm start's pass", lambda: frozen.extend(head._train_inputs(ids, y)),
          tokens, results, **info)
    opt = torch.optim.AdamW(head._trainable(), lr=head.lr)

    def epoch() -> None:
        head._train_mode(True)
        for b in head._batches(ids, np.random.default_rng(0), head.batch_size):
            loss = head._loss(head._train_forward([frozen[i] for i in b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        head._train_mode(False)

    timed("training: one epoch of the adapted layers", epoch, tokens, results, **info)
    head._calibrate(head._raw_from(head._outputs(frozen, head._train_forward)), y)
    head.fit_seconds_ = 0.0
    FROZEN.clear()  # prediction computes its frozen part too: one partial prefill with the adapter
    timed("prediction: adapted prefill to the layer", lambda: head.predict_points(X), tokens, results, **info)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--layer", type=int, default=20)
    ap.add_argument("--lora-layers", type=int, nargs="+", default=[8])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None,
                    help="also write the rows, settings, machine and commit here (JSON; docs/results/data/t6-costs/"
                         "lora_head_cost.json is what the docs render)")
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    X, y = prompts(a.n)
    results: list[dict] = []
    for threads in a.threads:
        for depth in a.lora_layers:
            bench_one(X, y, threads, depth, a.layer, a.batch_size, results)
    if a.out:
        from lengthpred.machine import record

        settings = {k: v for k, v in vars(a).items() if k != "out"}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record({"parts": results}, settings, load0), indent=1) + "\n")


if __name__ == "__main__":
    main()
