"""The vLLM plugin campaign's results page (`vllm serve` with lengthpred's plugin, measured by `vllm bench serve`):
docs/results/serving-plugin.md, from the committed campaign folders data/reference/smollm2-135m/vllm_bench/<cell>/.

The producer `serving-plugin` reads every cell folder (lengthpred.serve.vllm_bench_results) and commits, under
docs/results/data/serving-plugin/: `cells.csv` (each cell's settings, capacity and repeats done), `gains.csv`
(each arm's paired gains over stock FCFS per statistic), `report.md` (scripts/serve_bench_report.py's tables) and,
when benchmarks/bench_vllm_plugin.py's summary is committed beside the cells (`overhead/summary.json.gz`),
`overhead.json`. The page renders its sentences from those rows, each statistic named with its unit.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd

from docsgen.registry import Producer, page, register_producer
from docsgen.render import header
from docsgen.results import Results
from docsgen.studies import DATA

REFERENCE = "data/reference/smollm2-135m/vllm_bench"
OUT_DIR = f"{DATA}/serving-plugin"
CELLS, GAINS, REPORT, OVERHEAD = (f"{OUT_DIR}/cells.csv", f"{OUT_DIR}/gains.csv", f"{OUT_DIR}/report.md",
                                  f"{OUT_DIR}/overhead.json")
PAGE = "docs/results/serving-plugin.md"
_HERE = "docsgen/pages/serving_plugin.py"


def cell_folders(root: Path) -> list[Path]:
    base = root / REFERENCE
    return sorted(p.parent for p in base.glob("*/manifest.json")) if base.is_dir() else []


def campaign_files(root: Path) -> list[Path]:
    base = root / REFERENCE
    return sorted(f for f in base.rglob("*") if f.is_file()) if base.is_dir() else []


def run_campaign(root: Path) -> dict[str, str]:
    from lengthpred.serve.vllm_bench_report import BASELINE, report
    from lengthpred.serve.vllm_bench_results import cell_gains, load_cell

    folders = cell_folders(root)
    cells, gains = [], []
    for f in folders:
        manifest, requests, _, _ = load_cell(f)
        cap = json.loads((f / "capacity.json").read_text())["capacity_rps"] if (f / "capacity.json").is_file() else math.nan
        c = manifest["cell"]
        done = requests.groupby("policy")["seed"].nunique()
        cells.append({"cell": c["name"], "load": c["load"], "burstiness": c["burstiness"], "n_requests": c["n_requests"],
                      "repeats": c["repeats"], "repeats_done_min": int(done.min()), "capacity_rps": cap,
                      "vllm": manifest.get("vllm", ""), "commit": manifest.get("commit", ""),
                      "started": str(manifest.get("started", ""))[:10]})
        if BASELINE in done.index and len(done) > 1:
            g = cell_gains(requests, BASELINE)
            gains.append(g.assign(cell=c["name"]))
    out = {CELLS: _csv(pd.DataFrame(cells, columns=["cell", "load", "burstiness", "n_requests", "repeats",
                                                    "repeats_done_min", "capacity_rps", "vllm", "commit", "started"])),
           GAINS: _csv(pd.concat(gains, ignore_index=True) if gains else pd.DataFrame(columns=["cell"])),
           REPORT: (report(folders) if folders else "") + "\n"}
    summary = root / REFERENCE / "overhead" / "summary.json.gz"
    out[OVERHEAD] = (json.dumps(json.load(gzip.open(summary, "rt"))["summary"], indent=1, sort_keys=True) + "\n"
                     if summary.is_file() else "{}\n")
    return out


def _csv(df: pd.DataFrame) -> str:
    return df.to_csv(index=False, lineterminator="\n", float_format="%.6g")


register_producer(Producer("serving-plugin", (CELLS, GAINS, REPORT, OVERHEAD), campaign_files,
                           (_HERE, "lengthpred/serve/vllm_bench_report.py"), run_campaign))


def _pct(x: float) -> str:
    return "–" if not math.isfinite(float(x)) else f"{100 * float(x):+.1f}%"


@page(PAGE)
def render(res: Results) -> str:
    head = header(_HERE) + "# The vLLM plugin campaign\n\n"
    link = ("How to run the plugin: [serving with vLLM](../how-to/serve-with-vllm.md); the engine experiments run with "
            "the project's own replay loop: [serving](serving/index.md).\n")
    cells = res.csv(CELLS, ["cell", "load", "burstiness"], dtype=None) if res.text(CELLS).count("\n") > 1 else None
    if cells is None or cells.empty:
        return head + "No campaign of the vLLM plugin is committed yet.\n\n" + link
    text = [head,
            "Stock `vllm serve` against the same server with lengthpred's plugin, measured with vLLM's own client "
            "(`vllm bench serve`, unmodified), on the embedded SmolLM2-135M-Instruct on this project's 2-core CPU "
            "machine. Each repeat serves its own test prompts (drawn without replacement) with natural answers capped "
            "at 512 tokens, at a fraction of the capacity measured that day; every arm of a repeat serves the same "
            "prompts and arrivals, the arms' order rotates from repeat to repeat, and each run starts its own server "
            "from the same readout. A gain is 1 − arm / stock FCFS: positive means lower latency.\n\n", link, "\n"]
    gains = res.csv(GAINS, ["cell", "policy", "metric"], dtype=None) if res.text(GAINS).count("\n") > 1 else None
    if gains is not None and not gains.empty:
        text.append("## In one paragraph\n\n")
        for _, c in cells.iterrows():
            g = gains[(gains["cell"] == c["cell"]) & (gains["metric"] == "per_token_latency_mean")]
            for _, r in g.iterrows():
                text.append(f"- {c['cell']} (load {c['load']:g}, burstiness {c['burstiness']:g}), {r['policy']}: "
                            f"per-token latency (mean per run) {_pct(r['median_repeat_gain'])} median per-repeat gain, "
                            f"better in {int(r['repeats_better'])} of {int(r['n'])} repeats (exact sign-flip p "
                            f"{r['p_value']:.2g}); pooled ratio {_pct(r['gain'])}, "
                            f"{_pct(r['loro_low'])} to {_pct(r['loro_high'])} with one repeat left out.\n")
        text.append("\n")
    over = res.json(OVERHEAD)
    if over:
        o = over["plugin_over_stock"]
        text.append("## What the plugin costs\n\n"
                    "`benchmarks/bench_vllm_plugin.py`: stock vLLM against the plugin with prediction, updates and FCFS "
                    "order, on identical work (every request generates the same number of tokens), pairs run ABBA. "
                    f"Plugin / stock, median over pairs: request throughput {o['throughput']['median']:.3f} "
                    f"(range {o['throughput']['min']:.3f}–{o['throughput']['max']:.3f}), median TPOT "
                    f"{o['tpot_median_ms']['median']:.3f} (range {o['tpot_median_ms']['min']:.3f}–"
                    f"{o['tpot_median_ms']['max']:.3f}). Per request, median over runs: predict "
                    f"{over['per_request_ms']['predict']:.3f} ms, RLS update {over['per_request_ms']['update']:.3f} ms, "
                    f"and in the model's process {over['per_request_ms']['capture_per_prefill_step']:.3f} ms per "
                    f"prefill step to take the rows; against the median prefill step of "
                    f"{over['prefill_step_ms_median']:.1f} ms that is {100 * over['per_request_share_of_prefill_step']:.2f}% "
                    "of a step (median over runs).\n\n")
    from lengthpred.serve.tables_cli import md_table

    rows = [[str(c["cell"]), f"{c['load']:g}", f"{c['burstiness']:g}", str(c["n_requests"]),
             f"{c['repeats_done_min']} of {c['repeats']}", f"{c['capacity_rps']:.4g}", str(c["vllm"]), str(c["started"])]
            for _, c in cells.iterrows()]
    text += ["## The cells\n\n", md_table(["cell", "load (of capacity)", "burstiness", "requests per run",
                                            "repeats done (fewest over arms)", "capacity (req/s)", "vLLM", "run on"],
                                           rows),
             "\n## Every table\n\n", res.text(REPORT)]
    return "".join(text)
