"""How much pooling weight lands on the chat template's tokens, before and after `features.span=content`.

    .venv/bin/python benchmarks/bench_template_weight.py            # 40 demo prompts, embedded SmolLM2
    .venv/bin/python benchmarks/bench_template_weight.py --n 96 --threads 2

Variants (one prefill of each prompt serves all; attention importance from all 30 layers):
  before        span=all, attn_norm=sum, fuse_on=z: what every store made before these options holds
  all+lift      span=all, attn_norm=lift, fuse_on=log: the attention correction alone
  all+lift+sink the same with drop_sink=true
  content       the defaults: span=content, attn_norm=lift, fuse_on=log
  content+rank  span=content with fuse_on=rank
Printed per pool: the median share of weight on template tokens (outside the user/assistant contents),
the median top-1 weight and the median entropy of the weights relative to uniform (1 = uniform).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

VARIANTS = {
    "before": dict(span="all", attn_norm="sum", fuse_on="z"),
    "all+lift": dict(span="all", attn_norm="lift", fuse_on="log"),
    "all+lift+sink": dict(span="all", drop_sink=True, attn_norm="lift", fuse_on="log"),
    "content": dict(span="content", attn_norm="lift", fuse_on="log"),
    "content+rank": dict(span="content", attn_norm="lift", fuse_on="rank"),
}


def demo_prompts(n: int) -> list[dict]:
    """n demo prompts spread evenly over the id-sorted table (ids are hashes: no domain order)."""
    from hydra import compose, initialize_config_dir

    import lengthpred.cli  # noqa: F401  (registers the ${lp.*} resolvers)
    from lengthpred.data import load_prompts
    from lengthpred.paths import REPO_ROOT

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["data=demo"])
    rows = sorted(load_prompts(cfg.data), key=lambda r: r["id"])
    step = max(len(rows) // n, 1)
    return [{"id": r["id"], "messages": r["messages"]} for r in rows[::step][:n]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from lengthpred.features import FeatureSettings
    from lengthpred.features.diagnostics import pool_weight_stats, summarise, template_fraction
    from lengthpred.models.serving import load_causal_lm
    from lengthpred.models.specs import embedded_serving_spec

    model, tok = load_causal_lm(embedded_serving_spec())
    prompts = demo_prompts(args.n)
    frac = template_fraction(tok, prompts)
    print(f"{len(prompts)} demo prompts; share of template tokens per prompt: median {np.median(frac):.2f}",
          flush=True)
    base = dict(pools=("mean", "entropy", "attn"), fused=("mix0.5", "mix1.0", "prod"), batch_size=8)
    t0 = time.perf_counter()
    variants = {name: FeatureSettings(**base, **VARIANTS[name]) for name in args.variants}
    stats = pool_weight_stats(variants, model, tok, prompts)  # one forward per prompt for all variants
    print(f"{len(variants)} variants in {time.perf_counter() - t0:.1f} s", flush=True)
    for title, col in (("median share of weight on template tokens", "template_share"),
                       ("median top-1 weight", "top1"),
                       ("median entropy of the weights / log(span tokens)", "entropy_ratio")):
        print(f"\n{title}\n{summarise(stats, col).round(3).to_string()}", flush=True)


if __name__ == "__main__":
    main()
