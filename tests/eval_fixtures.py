"""Synthetic predictions / splits / reference / scheduling / costs files for the eval tests.

Other stages write these for real; here a latent expected length per prompt drives sampled lengths,
and heads differ in how much of it they see, so the right ordering of heads is known in advance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

DOMAINS = ("chat", "code", "math")
HEAD_NOISE = {"linear": 0.3, "prompt_len": 1.0}  # log-space noise: linear is the better head


def _ids(domain: str, n: int) -> list[str]:
    return [f"{domain[:2]}{i:014x}" for i in range(n)]


def write_experiment(
    root: Path, *, n: int = 40, k: int = 4, seed: int = 0, model: str = "smollm2-135m"
) -> Path:
    """An experiment dir: runs/r1 with .hydra/config.yaml + predictions.parquet, reference jsonl, splits.json."""
    rng = np.random.default_rng(seed)
    run = root / "runs" / "r1"
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    (run / ".hydra" / "config.yaml").write_text(
        f"experiment_name: synth\nmodel: {{name: {model}}}\ndata: {{name: synth}}\ngenerate: {{temperature: 0.7}}\n"
    )
    mu = {d: rng.normal(5.0 + 0.3 * i, 0.6, n) for i, d in enumerate(DOMAINS)}  # latent log expected length
    samples = {d: np.exp(mu[d][:, None] + rng.normal(0, 0.4, (n, k))) for d in DOMAINS}
    target = {d: samples[d].mean(axis=1) for d in DOMAINS}
    rows = []

    def add(head: str, split: str, dom: str, pred: np.ndarray) -> None:
        for i, pid in enumerate(_ids(dom, n)):
            rows.append(
                {
                    "head": head,
                    "split": split,
                    "id": pid,
                    "domain": dom,
                    "y_true": float(target[dom][i]),
                    "y_pred": float(pred[i]),
                    "n_samples": k,
                    "capped_frac": 0.0,
                    "n_parameters": 577,
                }
            )

    for d in DOMAINS:
        for h, s in HEAD_NOISE.items():
            add(h, f"indomain/{d}/test", d, np.exp(mu[d] + rng.normal(0, s, n)))
        add("constant", f"indomain/{d}/test", d, np.full(n, 200.0))
        for src in DOMAINS:
            if src != d:
                add("linear", f"cross/{src}->{d}/test", d, np.exp(mu[d] + rng.normal(0.2, 0.5, n)))
                add("static", f"cross/{src}->{d}/test", d, np.exp(mu[d] + rng.normal(0.2, 0.9, n)))
                add("rls@0.999", f"cross/{src}->{d}/test", d, np.exp(mu[d] + rng.normal(0, 0.35, n)))
    add("linear", "forelen/longseq", "chat", np.exp(mu["chat"] + rng.normal(0, 0.3, n)))
    add("linear", "forelen/rl", "math", np.exp(mu["math"] + rng.normal(0, 0.3, n)))
    pd.DataFrame(rows).to_parquet(run / "predictions.parquet", index=False)

    ref = root / "reference.jsonl"
    with ref.open("w") as f:
        f.write(json.dumps({"meta": {"model": "smollm2-135m"}}) + "\n")
        for d in DOMAINS:
            for i, pid in enumerate(_ids(d, n)):
                for j in range(k):
                    f.write(
                        json.dumps(
                            {
                                "id": pid,
                                "sample": j,
                                "length": float(samples[d][i, j]),
                                "finish_reason": "eos",
                            }
                        )
                        + "\n"
                    )
    cross = [
        {
            "name": f"{s}->{t}",
            "source": s,
            "target": t,
            "test": _ids(t, n),
            "shift": {
                "length_wasserstein": round(abs(0.3 * (DOMAINS.index(s) - DOMAINS.index(t))) + 0.01 * j, 4)
            },
        }
        for j, (s, t) in enumerate((s, t) for s in DOMAINS for t in DOMAINS if s != t)
    ]
    (root / "splits.json").write_text(json.dumps({"cross": cross}))
    return root


def write_sched(path: Path) -> Path:
    rows = []
    for load in (0.5, 0.9):
        for pol, pred, lat in (("fcfs", "-", 1.0), ("sjf", "linear", 0.8), ("sjf", "oracle", 0.6)):
            pol_name = "oracle-sjf" if pred == "oracle" else pol
            for m, v in (("per_token_latency_mean", lat * load), ("throughput", 100.0 / lat)):
                rows.append(
                    {
                        "policy": pol_name,
                        "predictor": pred,
                        "load": load,
                        "metric": m,
                        "value": v,
                        "ci_low": v * 0.95,
                        "ci_high": v * 1.05,
                    }
                )
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def write_costs(path: Path) -> Path:
    path.write_text(
        json.dumps(
            [
                {
                    "head": "linear",
                    "n_parameters": 577,
                    "extraction_overhead_pct": 8.0,
                    "predict_latency_ms": 0.004,
                },
                {
                    "head": "rls@0.999",
                    "n_parameters": 577,
                    "predict_latency_ms": 0.004,
                    "update_latency_ms": 0.3,
                },
            ]
        )
    )
    return path
