"""The lora head's bench fit (train runs of `head=lora`) as the record of its training cost that the T6 page
renders (issue 61's speed goal: a fit within 90 min per seed on 2 cores, with its tokens/s against a plain prefill).

    .venv/bin/python benchmarks/record_lora_fit.py outputs/bench/train_lora_s0 [outputs/bench/train_lora_s1 ...] \\
        --load-at-start 1.89 [...] --commit b88a2d6 [...] --out docs/results/data/t6-costs/lora_head_fit.json

Reads each run's metrics.json (each seed's seconds: its search on the train subsample, the refit on every train
prompt and its test predictions) and Hydra overrides: one run of several seeds (`head.n_seeds`), or one run per
seed (`head.n_seeds=1 head.params.random_state=<k>`: the same search, which draws from `seed`). Counts the train
prompts' tokens as the head encodes them (templated and truncated as extraction does). A plain prefill's tokens/s
is read from the committed cost record (benchmarks/bench_lora_head.py's lora_head_cost.json, the median of its
plain-prefill rows at the run's thread count). Seeds run in one process share the frozen layers' states the first
one computed, so there only the first seed's time is what a seed costs alone. Nothing is timed here:
`--load-at-start` is the load average read before each run started, `--commit` the commit each ran at.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_lora_head beside it

GOAL_MINUTES = 90.0
COST = Path(__file__).resolve().parent.parent / "docs/results/data/t6-costs/lora_head_cost.json"


def train_tokens(overrides: list[str]) -> tuple[int, int]:
    """(train prompts, their prompt tokens) of the run's in-domain train split, encoded as its head encodes them."""
    from bench_lora_head import train_set

    from lengthpred.heads.lora import LoraHead

    keep = [o for o in overrides if not o.lstrip("+").startswith(("hydra.", "head.params.n_threads"))]
    X, _, cfg = train_set(keep)
    head = LoraHead(model=cfg.head.params.get("model"), max_prompt_tokens=cfg.head.params.max_prompt_tokens)
    return len(X), int(sum(map(len, head._inputs(X))))


def plain_prefill_tokens_per_s(cost: dict[str, Any], threads: int) -> float:
    rows = [r["tokens_per_s"] for r in cost["result"]["parts"]
            if r["part"].startswith("plain") and int(r["threads"]) == threads]
    if not rows:
        raise SystemExit(f"{COST}: no plain-prefill row at {threads} threads; run benchmarks/bench_lora_head.py "
                         f"--threads {threads} first")
    return float(statistics.median(rows))


def run_metrics(run: Path) -> dict[str, Any]:
    metrics_file = run / "metrics.json"
    if not metrics_file.is_file():
        raise SystemExit(f"{metrics_file}: missing; give the folder of a finished head=lora train run")
    metrics = json.loads(metrics_file.read_text())
    if metrics.get("head") != "lora":
        raise SystemExit(f"{metrics_file}: a {metrics.get('head')!r} run, not head=lora")
    return metrics


def seed_rows(run: Path, metrics: dict[str, Any], tokens: int, plain: float) -> list[dict[str, Any]]:
    """One row per seed the run fitted."""
    seeds = metrics.get("seeds") or [{k: metrics[k] for k in ("spearman", "val_spearman", "selected", "fit_seconds")}
                                     | {"random_state": metrics["params"]["random_state"]}]
    return [{"run": os.fspath(run), "random_state": s["random_state"], "fit_seconds": s["fit_seconds"],
             "fit_minutes": round(s["fit_seconds"] / 60, 1),
             "train_tokens_per_s": round(tokens / s["fit_seconds"], 1),
             "plain_prefills_of_train": round(s["fit_seconds"] * plain / tokens, 1),
             "selected": s["selected"], "val_spearman": s["val_spearman"], "test_spearman": s["spearman"]}
            | {"candidates": [c for c in metrics.get("candidates", []) if c.get("random_state") == s["random_state"]]}
            for s in seeds]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="train run folders (metrics.json, .hydra/overrides.yaml): "
                                                        "one run of several seeds, or one run per seed")
    ap.add_argument("--load-at-start", type=float, nargs="+", required=True,
                    help="the load average read before each run started, in the order of the runs")
    ap.add_argument("--commit", nargs="+", default=None, help="the commit each run ran at (default: this checkout's)")
    ap.add_argument("--out", type=Path, default=None, help="write the record here (JSON)")
    a = ap.parse_args()
    for name, given in (("--load-at-start", a.load_at_start), ("--commit", a.commit)):
        if given is not None and len(given) != len(a.runs):
            raise SystemExit(f"{name}: give one value per run ({len(a.runs)} runs, {len(given)} values)")
    overrides = []
    for run in a.runs:
        f = run / ".hydra" / "overrides.yaml"
        if not f.is_file():
            raise SystemExit(f"{f}: missing; give the folder of a finished head=lora train run")
        overrides.append(yaml.safe_load(f.read_text()) or [])
    n_train, tokens = train_tokens(overrides[0])
    rows, metrics = [], {}
    for k, run in enumerate(a.runs):
        metrics = run_metrics(run)
        threads = int(metrics["params"]["n_threads"])
        plain = plain_prefill_tokens_per_s(json.loads(COST.read_text()), threads)
        seeds = seed_rows(run, metrics, tokens, plain)
        rows += [s | {"threads": threads, "load_at_start": a.load_at_start[k],
                      "commit": a.commit[k] if a.commit else None} for s in seeds]
    worst = max(s["fit_minutes"] for s in rows)
    result = {"seeds": rows, "train_prompts": n_train, "train_prompt_tokens": tokens,
              "plain_prefill_tokens_per_s": plain, "threads": threads, "n_val": metrics["n_val"],
              "n_test": metrics["n_test"], "n_candidates": metrics["n_candidates"], "search": metrics["search"],
              "goal_minutes_per_seed": GOAL_MINUTES, "max_minutes_per_seed": worst, "goal_met": worst <= GOAL_MINUTES,
              "one_process": len(a.runs) == 1 and len(rows) > 1}
    print(json.dumps(result, indent=1))
    if a.out:
        from lengthpred.machine import record

        rec = record(result, {"runs": [os.fspath(r) for r in a.runs], "overrides": overrides}, a.load_at_start[0])
        rec["machine"]["load_at_end"] = None  # written after the runs: the load now is not theirs
        if a.commit:
            rec["commit"] = ", ".join(dict.fromkeys(a.commit))
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__":
    main()
