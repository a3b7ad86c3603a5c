"""Training time of every head at demo scale on this machine (2 CPU cores).

    .venv/bin/python benchmarks/bench_heads.py                 # feature heads + all three proxy heads
    .venv/bin/python benchmarks/bench_heads.py --skip-proxy    # feature heads only (≈1 min)

Feature heads: synthetic d=576 features (SmolLM2-135M's width), 216 train / 72 val rows, each head's
conf/head/*.yaml params and `select:` grid (so the time includes selection). Proxy heads: the embedded
all-MiniLM-L6-v2 fine-tuned on the first 216 prompts of the prepared demo prompt table (real texts, so
real token counts), conf/head/proxy_*.yaml params; targets are synthetic (only the time is measured).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from lengthpred.heads import HeadInput, HeadSettings, LabeledSet, run_training
from lengthpred.heads.search import SearchSettings
from lengthpred.paths import data_dir
from lengthpred.stages.heads import head_file

FEATURE_HEADS = ["constant", "prompt_len", "domain_median", "linear", "egtp", "estp", "probe"]
PROXY_HEADS = ["proxy_reg", "proxy_cls", "proxy_rank"]


def head_settings(name: str, **params: object) -> HeadSettings:
    """The head file over its constructor's defaults, searched with conf/search's default budget."""
    raw = head_file(name) | {"search": None}  # `${search}` has no root config to resolve against here
    cfg = HeadSettings.from_mapping(raw, group=f"head {name}").replace(search=SearchSettings())
    fixed = {k: v for k, v in {"random_state": 0, "progress": False}.items() if k in cfg.params}
    return cfg.replace(params=cfg.params | fixed | params)


def synthetic(n: int, d: int, seed: int, texts: list[str] | None = None) -> LabeledSet:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = np.round(np.expm1(4.5 + X[:, :8].sum(axis=1) * 0.15 + 0.3 * rng.normal(size=n))).clip(1, 320)
    inp = HeadInput(
        ids=[f"{seed}-{i}" for i in range(n)],
        features=X,
        texts=texts or [f"prompt {i}" for i in range(n)],
        domains=list(rng.choice(["chat", "math", "code", "writing", "summarization", "qa"], n)),
        n_prompt_tokens=rng.integers(10, 1000, n).astype(float),
    )
    return LabeledSet(inp, y)


def demo_texts(n: int) -> list[str]:
    from omegaconf import OmegaConf as OC

    import lengthpred.cli  # noqa: F401  (resolvers)
    from lengthpred.data import load_prompts
    from lengthpred.heads.assemble import prompt_text

    data_cfg = OC.create({"name": "demo", "out_dir": str(data_dir() / "splits" / "demo")})
    prompts = load_prompts(data_cfg)
    return [prompt_text(r["messages"]) for r in prompts.select(range(n))]


def main() -> None:
    """Wall times depend on what else runs on the 2 cores; CPU seconds are printed for the proxies."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-proxy", action="store_true")
    ap.add_argument("--proxy-heads", nargs="*", default=PROXY_HEADS)
    ap.add_argument("--proxy-threads", type=int, default=None, help="override the proxies' n_threads")
    ap.add_argument("--progress", action="store_true", help="tqdm bar per proxy epoch")
    args = ap.parse_args()
    torch.set_num_threads(2)
    train, val, test = synthetic(216, 576, 0), synthetic(72, 576, 1), synthetic(72, 576, 2)
    print(
        f"{'head':14} {'fit s':>7} {'candidates':>10} {'params':>10} {'spearman':>9}  (d=576, 216 train / 72 val)"
    )
    for name in FEATURE_HEADS:
        t0 = time.perf_counter()
        _, m, _ = run_training(name, head_settings(name), train, val, test)
        print(
            f"{name:14} {time.perf_counter() - t0:7.1f} {m['n_candidates']:10d} {m['n_parameters']:10d} {m['spearman'] or 0:9.2f}"
        )
    if args.skip_proxy:
        return
    texts = demo_texts(216 + 72)
    train, test = synthetic(216, 4, 0, texts[:216]), synthetic(72, 4, 2, texts[216:])
    from transformers import AutoTokenizer

    from lengthpred.models.specs import embedded_proxy_dir

    tok = AutoTokenizer.from_pretrained(str(embedded_proxy_dir()))
    n_tok = [len(ids) for ids in tok(texts[:216], truncation=True, max_length=256)["input_ids"]]
    print(
        f"proxy train texts: median {int(np.median(n_tok))} MiniLM tokens (capped at 256), {np.mean(np.array(n_tok) == 256):.0%} truncated"
    )
    for name in args.proxy_heads:
        t0, c0 = time.perf_counter(), time.process_time()
        threads = {"n_threads": args.proxy_threads} if args.proxy_threads else {}
        head, m, _ = run_training(name, head_settings(name, progress=args.progress, **threads), train, None, test)
        p = head.get_params()
        print(
            f"{name:14} {time.perf_counter() - t0:7.1f} s wall ({time.process_time() - c0:.0f} s CPU), "
            f"fine-tune {head.fit_seconds_:.1f} s "
            f"({p['epochs']} epochs, batch {p['batch_size']}, max_seq_len {p['max_seq_len']}), {m['n_parameters']} params"
        )


if __name__ == "__main__":
    main()
