"""The plugin's tuning cells (aging weight, yield cap, deadline), served from the validation split into
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

from docsgen.registry import Producer, helper, register_producer
from docsgen.results import Results
from docsgen.studies import DATA

TUNING = "data/reference/smollm2-135m/vllm_bench_tuning"
TUNING_CSV = f"{DATA}/serving-plugin/tuning.csv"
_HERE = "docsgen/pages/serving_tuning.py"
# what a setting trades: the mean per-token latency SJF is for, the tail aging guards, the decode speed yields cost
METRICS = {"per_token_latency_mean": "per-token latency (mean per run)", "jct_p99": "E2E latency (p99 per run)",
           "ttft_mean": "TTFT (mean per run)", "tpot_mean": "TPOT (mean per run)"}
YIELDS = "yields_per_request"  # the plugin's own log: how often a request gave up its slot (no stock value)
BASELINE = "stock-fcfs"
GOAL_TAIL = -0.10  # the tail's bound: E2E p99 no worse than stock FCFS by more than 10%


def tuning_files(root: Path) -> list[Path]:
    base = root / TUNING
    return sorted(f for f in base.rglob("*") if f.is_file()) if base.is_dir() else []


def run_tuning(root: Path) -> dict[str, str]:
    from lengthpred.serve.vllm_bench_results import load_cell, run_metrics

    rows = []
    base = root / TUNING
    for folder in sorted(p.parent for p in base.glob("*/manifest.json")) if base.is_dir() else []:
        manifest, requests, _, plugin = load_cell(folder)
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
            for k, s in enumerate(seeds):
                p = plugin[(plugin["arm"] == arm) & (plugin["repeat"] == s)] if YIELDS in plugin else plugin.iloc[:0]
                rows.append({"cell": manifest["cell"]["name"], "load": manifest["cell"]["load"], "arm": arm,
                             "metric": YIELDS, "repeat": k, "seed": s, "stock": np.nan,
                             "arm_value": float(p[YIELDS].iloc[0]) if len(p) else np.nan, "gain": np.nan})
    df = pd.DataFrame(rows, columns=["cell", "load", "arm", "metric", "repeat", "seed", "stock", "arm_value",
                                     "gain"])
    return {TUNING_CSV: df.to_csv(index=False, lineterminator="\n", float_format="%.6g")}


register_producer(Producer("serving-plugin-tuning", (TUNING_CSV,), tuning_files,
                           (_HERE, "lengthpred/serve/vllm_bench_results.py"), run_tuning))


def tuning_section(res: Results, tail_bound: float) -> str:
    """The tuning cells as tables: each arm's gain over stock FCFS per repeat and its median, per statistic."""
    from docsgen.numbers import pct
    from lengthpred.serve.tables_cli import md_table

    if res.text(TUNING_CSV).count("\n") < 2:
        return ""
    df = res.csv(TUNING_CSV, ["cell", "arm", "metric", "repeat", "arm_value", "gain"], dtype=None)
    out = ["## Tuning on validation arrivals\n\n"
           "Candidate settings run as arms of cells served from the validation split (prompts and arrivals the test "
           "cells never use), at the same load, against stock FCFS in the same repeat. A gain is 1 − arm / stock; "
           f"the tail's bound: E2E p99 no worse than stock by more than {pct(-tail_bound, signed=False)} (a median "
           f"per-repeat gain of at least {pct(tail_bound)}). These cells choose settings "
           "and are descriptive: a few repeats, no interval, no test. The plugin prefills every arrival at once (the "
           "prediction needs its prefill), so a request that then waits parked waits after its first token: its wait "
           "shows in TPOT, not in TTFT. A yield is a request giving up its batch slot, after its prefill or "
           "during its decode; with a yield cap k, a decode that has yielded k times keeps its slot against other "
           "decodes.\n\n"]
    for cell, c in df.groupby("cell", sort=True):
        n = int(c["repeat"].max()) + 1
        out.append(f"### {cell} (load {float(c['load'].iloc[0]):g}, {n} repeats)\n\n")
        rows = []
        for arm, a in c.groupby("arm", sort=False):
            cells = [f"`{arm}`"]
            for m in METRICS:
                g = a[a["metric"] == m].sort_values("repeat")["gain"].to_numpy(float)
                cells.append(", ".join(pct(v) for v in g) + f" (median {pct(float(np.median(g)))})")
            y = a[a["metric"] == YIELDS]["arm_value"].to_numpy(float)
            cells.append(f"{np.nanmedian(y):.2f}" if np.isfinite(y).any() else "")
            meets = np.median(a[a["metric"] == "jct_p99"]["gain"].to_numpy(float)) >= tail_bound
            cells.append("yes" if meets else "no")
            rows.append(cells)
        out.append(md_table(["arm", *[f"{v}: gain per repeat" for v in METRICS.values()],
                             "yields per request (median over repeats)", "median E2E p99 within the bound"], rows)
                   + "\n")
    return "".join(out)


@helper
def plugin_tuning(res: Results, tail_bound: float = GOAL_TAIL) -> dict:
    """The tuning cells in one line's numbers: settings tried, how many keep the median per-repeat E2E p99 gain
    within `tail_bound`, and the best setting with its median p99 gain and repeats."""
    from docsgen.numbers import pct

    df = res.csv(TUNING_CSV, ["cell", "arm", "metric", "repeat", "gain"], dtype=None)
    p99 = df[df["metric"] == "jct_p99"].groupby("arm")["gain"].agg(["median", "count"])
    if p99.empty:
        res.fail(TUNING_CSV, "no tuning rows")
    best = p99["median"].idxmax()
    return {"n": len(p99), "meeting": int((p99["median"] >= tail_bound).sum()), "bound": pct(-tail_bound, signed=False),
            "best": best, "best_gain": pct(p99.loc[best, "median"]), "repeats": int(p99["count"].min())}
