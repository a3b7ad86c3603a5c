"""The plugin's tuning cells (aging weight, yield cap), served from the validation split into
data/reference/smollm2-135m/vllm_bench_tuning/<cell>/: each arm's gain over stock FCFS in each repeat, for the
serving-plugin page's tuning section. Descriptive only: a few repeats on validation arrivals choose settings,
the test cells measure them.

The producer `serving-plugin-tuning` commits docs/results/data/serving-plugin/tuning.csv: one row per (cell, arm,
metric, repeat) with the gain 1 − arm / stock in that repeat.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from docsgen.registry import Producer, register_producer
from docsgen.results import Results
from docsgen.studies import DATA

TUNING = "data/reference/smollm2-135m/vllm_bench_tuning"
TUNING_CSV = f"{DATA}/serving-plugin/tuning.csv"
_HERE = "docsgen/pages/serving_tuning.py"
# what a setting trades: the mean per-token latency SJF is for, the tail aging guards, the decode speed yields cost
METRICS = {"per_token_latency_mean": "per-token latency (mean per run)", "jct_p99": "E2E latency (p99 per run)",
           "tpot_mean": "TPOT (mean per run)"}
BASELINE = "stock-fcfs"


def tuning_files(root: Path) -> list[Path]:
    base = root / TUNING
    return sorted(f for f in base.rglob("*") if f.is_file()) if base.is_dir() else []


def run_tuning(root: Path) -> dict[str, str]:
    from lengthpred.serve.vllm_bench_results import load_cell, run_metrics

    rows = []
    base = root / TUNING
    for folder in sorted(p.parent for p in base.glob("*/manifest.json")) if base.is_dir() else []:
        manifest, requests, _, _ = load_cell(folder)
        wide = run_metrics(requests).pivot_table(index=["policy", "seed"], columns="metric", values="value")
        arms = [a["name"] for a in manifest["arms"]]
        for arm in (a for a in arms if a != BASELINE and a in wide.index.get_level_values(0)):
            seeds = sorted(set(wide.loc[BASELINE].index) & set(wide.loc[arm].index))
            for m in METRICS:
                for k, s in enumerate(seeds):
                    rows.append({"cell": manifest["cell"]["name"], "load": manifest["cell"]["load"],
                                 "arm": arm, "metric": m, "repeat": k, "seed": s,
                                 "stock": wide.loc[(BASELINE, s), m], "arm_value": wide.loc[(arm, s), m],
                                 "gain": 1 - wide.loc[(arm, s), m] / wide.loc[(BASELINE, s), m]})
    df = pd.DataFrame(rows, columns=["cell", "load", "arm", "metric", "repeat", "seed", "stock", "arm_value",
                                     "gain"])
    return {TUNING_CSV: df.to_csv(index=False, lineterminator="\n", float_format="%.6g")}


register_producer(Producer("serving-plugin-tuning", (TUNING_CSV,), tuning_files,
                           (_HERE, "lengthpred/serve/vllm_bench_results.py"), run_tuning))


def tuning_section(res: Results, tail_bound: float) -> str:
    """The tuning cells as tables: each arm's gain over stock FCFS per repeat and its median, per statistic."""
    from lengthpred.serve.tables_cli import md_table

    if res.text(TUNING_CSV).count("\n") < 2:
        return ""
    df = res.csv(TUNING_CSV, ["cell", "arm", "metric", "repeat", "gain"], dtype=None)
    out = ["## Tuning on validation arrivals\n\n"
           "Candidate settings run as arms of cells served from the validation split (prompts and arrivals the test "
           "cells never use), at the same load, against stock FCFS in the same repeat. A gain is 1 − arm / stock; "
           f"the tail's bound: E2E p99 no worse than stock by more than {-100 * tail_bound:.0f}% (a gain of at least "
           f"{100 * tail_bound:.0f}%). These cells choose settings "
           "and are descriptive: a few repeats, no interval, no test.\n\n"]
    for cell, c in df.groupby("cell", sort=True):
        n = int(c["repeat"].max()) + 1
        out.append(f"### {cell} (load {float(c['load'].iloc[0]):g}, {n} repeats)\n\n")
        rows = []
        for arm, a in c.groupby("arm", sort=False):
            cells = [f"`{arm}`"]
            for m in METRICS:
                g = a[a["metric"] == m].sort_values("repeat")["gain"].to_numpy(float)
                cells.append(", ".join(f"{100 * v:+.0f}%" for v in g) + f" (median {100 * np.median(g):+.0f}%)")
            meets = np.median(a[a["metric"] == "jct_p99"]["gain"].to_numpy(float)) >= tail_bound
            cells.append("yes" if meets else "no")
            rows.append(cells)
        out.append(md_table(["arm", *[f"{v}: gain per repeat" for v in METRICS.values()],
                             "median E2E p99 within the bound"], rows) + "\n")
    return "".join(out)
