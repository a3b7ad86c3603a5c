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

from docsgen.pages.serving_tuning import GOAL_TAIL, tuning_section
from docsgen.registry import Producer, helper, page, register_producer
from docsgen.render import header
from docsgen.results import Results
from docsgen.studies import DATA

REFERENCE = "data/reference/smollm2-135m/vllm_bench"
OUT_DIR = f"{DATA}/serving-plugin"
CELLS, GAINS, REPORT, OVERHEAD = (f"{OUT_DIR}/cells.csv", f"{OUT_DIR}/gains.csv", f"{OUT_DIR}/report.md",
                                  f"{OUT_DIR}/overhead.json")
STEPS = f"{OUT_DIR}/steps.csv"  # each arm's engine step time at a full batch (the machine-drift check)
PAGE = "docs/results/serving-plugin.md"
_HERE = "docsgen/pages/serving_plugin.py"


def cell_folders(root: Path) -> list[Path]:
    base = root / REFERENCE
    return sorted(p.parent for p in base.glob("*/manifest.json")) if base.is_dir() else []


def campaign_files(root: Path) -> list[Path]:
    base = root / REFERENCE
    return sorted(f for f in base.rglob("*") if f.is_file()) if base.is_dir() else []


def run_campaign(root: Path) -> dict[str, str]:
    from lengthpred.serve.vllm_bench_report import BASELINE, report, step_times
    from lengthpred.serve.vllm_bench_results import cell_gains, load_cell

    folders = cell_folders(root)
    cells, gains, steps = [], [], []
    for f in folders:
        manifest, requests, vruns, plugin = load_cell(f)
        cap = json.loads((f / "capacity.json").read_text())["capacity_rps"] if (f / "capacity.json").is_file() else math.nan
        c = manifest["cell"]
        done = requests.groupby("policy")["seed"].nunique()
        cells.append({"cell": c["name"], "load": c["load"], "burstiness": c["burstiness"], "n_requests": c["n_requests"],
                      "repeats": c["repeats"], "repeats_done_min": int(done.min()), "capacity_rps": cap,
                      "vllm": manifest.get("vllm", ""), "commit": manifest.get("commit", ""),
                      "started": str(manifest.get("started", ""))[:10],
                      "batch_cap": manifest.get("server", {}).get("max_num_seqs"),
                      "max_tokens": _max_tokens(manifest), "cpus": manifest.get("machine", {}).get("cpus"),
                      "yields": int(plugin["yields"].sum()) if "yields" in plugin else 0,
                      "kv_preempted": int(plugin["kv_preempted"].sum()) if "kv_preempted" in plugin else 0})
        st = step_times(vruns, [a["name"] for a in manifest["arms"]], BASELINE)
        if not st.empty:
            steps.append(st.assign(cell=c["name"]))
        if BASELINE in done.index and len(done) > 1:
            g = cell_gains(requests, BASELINE)
            gains.append(g.assign(cell=c["name"]))
    out = {CELLS: _csv(pd.DataFrame(cells, columns=["cell", "load", "burstiness", "n_requests", "repeats",
                                                    "repeats_done_min", "capacity_rps", "vllm", "commit", "started", "batch_cap",
                                                    "yields", "kv_preempted", "max_tokens", "cpus"])),
           STEPS: _csv(pd.concat(steps, ignore_index=True) if steps else pd.DataFrame(columns=["cell", "arm"])),
           GAINS: _csv(pd.concat(gains, ignore_index=True) if gains else pd.DataFrame(columns=["cell"])),
           REPORT: (report(folders) if folders else "") + "\n"}
    summary = root / REFERENCE / "overhead" / "summary.json.gz"
    if summary.is_file():
        bench = json.load(gzip.open(summary, "rt"))
        over = {**bench["summary"], "pairs": len({r["pair"] for r in bench["runs"]})}
        out[OVERHEAD] = json.dumps(over, indent=1, sort_keys=True) + "\n"
    else:
        out[OVERHEAD] = "{}\n"
    return out


def _csv(df: pd.DataFrame) -> str:
    return df.to_csv(index=False, lineterminator="\n", float_format="%.6g")


register_producer(Producer("serving-plugin", (CELLS, GAINS, REPORT, OVERHEAD, STEPS), campaign_files,
                           (_HERE, "lengthpred/serve/vllm_bench_report.py", "lengthpred/serve/vllm_bench_results.py"),
                           run_campaign))


HARNESS = f"{DATA}/serving/paired_gains.csv"
HARNESS_FOLDERS = f"{DATA}/serving/folders.csv"
HARNESS_RUNS = ("serve_bench_pool10", "serve_natural10_blas1")  # the bench pool replayed; natural answers
# the targets: SJF's median per-repeat per-token gain at load 0.95, the overhead (the tail's: GOAL_TAIL)
GOAL_SJF, GOAL_COST, GOAL_SHARE = 0.20, 0.02, 0.01


def _gain_row(gains: pd.DataFrame, cell: str, policy: str, metric: str) -> pd.Series | None:
    hit = gains[(gains["cell"] == cell) & (gains["policy"] == policy) & (gains["metric"] == metric)]
    return hit.iloc[0] if len(hit) == 1 else None


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def _provisional(verdict: str, n: int, full: int = 10) -> str:
    """A verdict on fewer repeats than a campaign cell's ten is marked provisional."""
    return verdict if n >= full else f"{verdict} so far ({n} of {full} repeats: provisional)"


def _spread(over: dict) -> float:
    """The widest range of plugin / stock over the overhead pairs (0 without a benchmark)."""
    if not over:
        return 0.0
    return max(v["max"] - v["min"] for v in over["plugin_over_stock"].values())


def _goals(cells: pd.DataFrame, gains: pd.DataFrame, over: dict) -> str:
    """The issue's speed and gain targets against what was measured, each with its statistic."""
    from lengthpred.serve.tables_cli import md_table

    rows = []
    for cell in sorted(set(gains["cell"])):
        sjf = _gain_row(gains, cell, "plugin-sjf", "per_token_latency_mean")
        aged = sorted(p for p in set(gains.loc[gains["cell"] == cell, "policy"]) if p.startswith("plugin-sjf-aging"))
        if sjf is not None:
            rows.append([cell, f"plugin SJF per-token latency ≥ {_pct(GOAL_SJF)} over stock FCFS",
                         f"{_pct(sjf['median_repeat_gain'])} (median per-repeat gain of the per-run mean, "
                         f"{int(sjf['n'])} repeats)", _provisional(_met(sjf["median_repeat_gain"] >= GOAL_SJF),
                                                                int(sjf["n"]))])
        for arm in aged:
            tail = _gain_row(gains, cell, arm, "jct_p99")
            if tail is None:
                continue
            rows.append([cell, f"plugin SJF + aging (`{arm}`) E2E p99 no worse than stock FCFS by more than "
                               f"{-GOAL_TAIL:.0%}",
                         f"{_pct(tail['median_repeat_gain'])} (median per-repeat gain of the per-run p99, "
                         f"{int(tail['n'])} repeats)", _provisional(_met(tail["median_repeat_gain"] >= GOAL_TAIL),
                                                                 int(tail["n"]))])
    if over:
        o = over["plugin_over_stock"]
        rows.append(["overhead", f"plugin FCFS costs ≤ {GOAL_COST:.0%} throughput against stock",
                     f"plugin / stock request throughput {o['throughput']['min']:.3f} in the worst of "
                     f"{over['pairs']} pairs (median {o['throughput']['median']:.3f}{_above(o['throughput'], over)})",
                     _cost_verdict(o["throughput"], higher_is_better=True)])
        rows.append(["overhead", f"… and ≤ {GOAL_COST:.0%} TPOT",
                     f"plugin / stock median TPOT {o['tpot_median_ms']['max']:.3f} in the worst of {over['pairs']} pairs "
                     f"(median {o['tpot_median_ms']['median']:.3f}{_above(o['tpot_median_ms'], over)})",
                     _cost_verdict(o["tpot_median_ms"], higher_is_better=False)])
        rows.append(["overhead", f"readout and RLS update per request ≤ {GOAL_SHARE:.0%} of a prefill step",
                     f"{100 * over['per_request_share_of_prefill_step']:.2f}% (median over runs)",
                     _met(over["per_request_share_of_prefill_step"] <= GOAL_SHARE)])
    for _, c in cells.iterrows():
        rows.append([str(c["cell"]), "no re-prefill for a yielded decode while KV memory allows",
                     f"{int(c['yields'])} yields; {int(c['kv_preempted'])} times a parked request gave its KV blocks back "
                     "(sums over the plugin's runs)", _met(int(c["kv_preempted"]) == 0)])
    return ("## Against the goals it was built for\n\n"
            "The targets set before the campaign; a goal not met is reported as such, beside what was measured. "
            "The overhead pairs serve identical work (fixed lengths), so they measure cost, not ordering"
            + (f"; the spread between pairs is larger than the {GOAL_COST:.0%} goal (the same stock server's "
               "throughput moves that much from run to run on this machine), so a cost below it can be neither shown "
               "nor ruled out there; the per-request share of a prefill step is the direct measurement.\n\n"
               if _spread(over) > GOAL_COST else ".\n\n")
            + md_table(["cell", "goal", "measured", "verdict"], rows) + "\n")


def _harness(res: Results, cells: pd.DataFrame, gains: pd.DataFrame) -> str:
    """The replay harness's ten-repeat gains at the same load beside the plugin's."""
    from lengthpred.serve.tables_cli import md_table
    from lengthpred.serve.vllm_bench import ARMS

    aging = ARMS["plugin-sjf-aging"].plugin["aging_weight"]
    h = res.csv(HARNESS, ["folder", "baseline", "policy", "metric", "gain", "median_per_repeat", "p_value", "n"],
                dtype=None)
    info = res.csv(HARNESS_FOLDERS, ["folder", "workload"]).set_index("folder")["workload"]
    rows = []
    for metric, label in (("per_token_latency_mean", "per-token latency, mean per run"),
                          ("jct_p99", "E2E, p99 per run")):
        for folder in HARNESS_RUNS:
            what = f"harness `{folder}`: {info.get(folder, '?')}"
            for pol in ("sjf", "sjf-aging"):
                r = h[(h["folder"] == folder) & (h["baseline"] == "fcfs") & (h["policy"] == pol) & (h["metric"] == metric)]
                if len(r) == 1:
                    r = r.iloc[0]
                    rows.append([label, what, f"{r['load']:g}", pol, _pct(r["median_per_repeat"]), _pct(r["gain"]),
                                 f"{r['p_value']:.2g}", str(int(r["n"]))])
        for _, c in cells.iterrows():
            for pol in ("plugin-sjf", "plugin-sjf-aging"):
                r = _gain_row(gains, c["cell"], pol, metric)
                if r is not None:
                    rows.append([label, f"`vllm serve` + plugin ({c['cell']}): natural answers, cap {c['batch_cap']}, "
                                 f"{c['n_requests']} req", f"{c['load']:g}", pol,
                                 _pct(r["median_repeat_gain"]), _pct(r["gain"]), f"{r['p_value']:.2g}",
                                 str(int(r["n"]))])
    return ("## Against the replay harness\n\n"
            "The replay harness ([serving](serving/index.md)) drove `LLMEngine.step()` from its own loop. Below are "
            "its two ten-repeat folders nearest this campaign, each with its workload (pool, arrivals, answers, batch cap, "
            "requests per run) and load. Gains over FCFS (vLLM's own order in both, as stock FCFS is here):\n\n"
            + md_table(["statistic", "setting", "load (of capacity)", "policy", "median per-repeat gain", "pooled ratio", "exact p",
                        "repeats"], rows)
            + "\nWhere they differ, and why: (1) `serve_bench_pool10` served every request to its recorded length, "
            "so every policy did the same work; here answers end naturally, and the batch's arithmetic lets the same "
            "request's answer differ between arms (the *work each arm did* table below), which at 0.95 of capacity "
            "moves queueing as much as the order does; (2) the harness yielded a decode by aborting and re-adding "
            "it (re-prefilling its tail), the plugin parks it with its KV blocks kept and resumes it only when its "
            "key ranks inside the batch's slots again; (3) here requests pass through vLLM's OpenAI server and its "
            "own client over HTTP, with vLLM's defaults (prefix caching on), as a user's server runs. Both prefill "
            "every arrival before ranking it (LEAP predicts from the prefill), so TTFT falls while a long request "
            "can be passed by every shorter arrival; why the plugin's E2E tail differs from the harness's is not "
            f"yet measured apart (the test cells' aging weight, {aging:g} tokens² per second, was carried over "
            "from the harness; the tuning section below tries heavier aging and a yield cap on validation "
            "arrivals).\n\n")


def _max_tokens(manifest: dict) -> int | None:
    """The answer cap the cell's client sent: the manifest's own record, else its `vllm bench serve` command's
    `--custom-output-len` (cells written before the manifest recorded it)."""
    if "max_tokens" in manifest:
        return int(manifest["max_tokens"])
    cmd = manifest.get("commands", {}).get("bench", [])
    return int(cmd[cmd.index("--custom-output-len") + 1]) if "--custom-output-len" in cmd else None


def _values(cells: pd.DataFrame, column: str) -> str:
    """A setting as one value, or the cells' values joined, for the page's prose ("–" where no cell recorded it)."""
    vals = sorted({int(v) for v in cells[column].dropna()}) if column in cells else []
    return " or ".join(str(v) for v in vals) or "–"


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
            "(`vllm bench serve`, unmodified), on the embedded SmolLM2-135M-Instruct on this project's "
            f"{_values(cells, 'cpus')}-core CPU machine. Each repeat serves its own test prompts (drawn without "
            f"replacement) with natural answers capped at {_values(cells, 'max_tokens')} tokens, at a fraction of the capacity measured that day; every arm of a repeat serves the same "
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
    text.append(_steps(res, cells))
    over = res.json(OVERHEAD)
    if over:
        o = over["plugin_over_stock"]
        text.append("## What the plugin costs\n\n"
                    "`benchmarks/bench_vllm_plugin.py`: stock vLLM against the plugin with prediction, updates and FCFS "
                    "order, on identical work (every request generates the same number of tokens), pairs run ABBA. "
                    f"Plugin / stock over {over.get('pairs', '?')} pairs, median: request throughput "
                    f"{o['throughput']['median']:.3f} (range {o['throughput']['min']:.3f}–{o['throughput']['max']:.3f}"
                    f"{_above(o['throughput'], over)}), median TPOT {o['tpot_median_ms']['median']:.3f} (range "
                    f"{o['tpot_median_ms']['min']:.3f}–{o['tpot_median_ms']['max']:.3f}"
                    f"{_above(o['tpot_median_ms'], over)}). Per request, median over runs: predict "
                    f"{over['per_request_ms']['predict']:.3f} ms, RLS update {over['per_request_ms']['update']:.3f} ms, "
                    f"and in the model's process {over['per_request_ms']['capture_per_prefill_step']:.3f} ms per "
                    f"prefill step to take the rows; against the median prefill step of "
                    f"{over['prefill_step_ms_median']:.1f} ms that is {100 * over['per_request_share_of_prefill_step']:.2f}% "
                    "of a step (median over runs).\n\n")
    from lengthpred.serve.tables_cli import md_table

    if gains is not None and not gains.empty:
        text += _goals(cells, gains, over), _harness(res, cells, gains)
    text.append(tuning_section(res, GOAL_TAIL))
    rows = [[str(c["cell"]), f"{c['load']:g}", f"{c['burstiness']:g}", str(c["n_requests"]),
             f"{c['repeats_done_min']} of {c['repeats']}", f"{c['capacity_rps']:.4g}", str(c["vllm"]), str(c["started"])]
            for _, c in cells.iterrows()]
    text += ["## The cells\n\n", md_table(["cell", "load (of capacity)", "burstiness", "requests per run",
                                            "repeats done (fewest over arms)", "capacity (req/s)", "vLLM", "run on"],
                                           rows),
             "\n## Every table\n\n", res.text(REPORT)]
    return "".join(text)


def _cost_verdict(ratio: dict, *, higher_is_better: bool) -> str:
    """Met: even the worst pair is within the goal. Not met: the median is past it and the sign-flip test says the
    plugin is worse. Otherwise not shown: no cost detected, but the pairs spread wider than the goal."""
    worst = ratio["min"] if higher_is_better else ratio["max"]
    if (worst >= 1 - GOAL_COST) if higher_is_better else (worst <= 1 + GOAL_COST):
        return _met(True)
    med = ratio["median"]
    worse = med < 1 - GOAL_COST if higher_is_better else med > 1 + GOAL_COST
    if worse and ratio.get("sign_flip_p", 1.0) < 0.05:
        return _met(False)
    return "**not shown**: no cost detected, the pairs spread wider than the goal"


def _above(ratio: dict, over: dict) -> str:
    """", above 1 in k of n pairs, exact sign-flip p on the log ratios" where the summary counted them."""
    if "pairs_above_1" not in ratio:
        return ""
    return f"; above 1 in {ratio['pairs_above_1']} of {over.get('pairs', '?')} pairs, exact sign-flip p {ratio['sign_flip_p']:.2g}"


def _steps(res: Results, cells: pd.DataFrame) -> str:
    """Did the machine run every arm equally fast? Each arm's engine step at a full batch (steps.csv)."""
    if res.text(STEPS).count("\n") < 2:
        return ""
    st = res.csv(STEPS, ["cell", "arm", "step_ms", "ratio_median", "ratio_min", "ratio_max"], dtype=None)
    out = ["## Did every arm run on an equally fast machine?\n\n"
           "The engine's step time at a full batch (every batch slot held by a request between its first and last "
           "token), read from the client's token times: the median gap per run, then the median over repeats; and "
           "each arm's step against stock FCFS's in the same repeat. A policy that keeps long contexts parked can "
           "step a little faster at the same batch, so this bounds the drift rather than isolating it.\n\n"]
    for _, c in cells.iterrows():
        rows = st[st["cell"] == c["cell"]]
        parts = [f"{r['arm']} {r['step_ms']:.1f} ms" + ("" if r["arm"] == "stock-fcfs" else
                 f" (÷ stock in the same repeat: median {r['ratio_median']:.3f}, {r['ratio_min']:.2f}–"
                 f"{r['ratio_max']:.2f} over repeats)") for _, r in rows.iterrows()]
        out.append(f"- {c['cell']}: " + "; ".join(parts) + ".\n")
    return "".join(out) + "\n"


@helper
def plugin_gain(res: Results, cell: str, policy: str, metric: str) -> dict:
    """One arm's paired gain over stock FCFS in one campaign cell (gains.csv): the median per-repeat gain, repeats
    better of n, exact sign-flip p, the pooled ratio and its range with one repeat left out, and the cell's load
    and burstiness (cells.csv)."""
    from docsgen.numbers import pct

    r = _gain_row(res.csv(GAINS, ["cell", "policy", "metric"], dtype=None), cell, policy, metric)
    if r is None:
        res.fail(GAINS, f"no single row for {cell} {policy} {metric}")
    c = res.row(CELLS, res.csv(CELLS, ["cell", "load", "burstiness"]), cell=cell)
    return {"median": pct(r.median_repeat_gain), "better": int(r.repeats_better), "n": int(r.n), "p": float(r.p_value),
            "pooled": pct(r.gain), "loro": f"{pct(r.loro_low)} to {pct(r.loro_high)}", "load": c["load"],
            "burstiness": c["burstiness"]}


@helper
def plugin_cells(res: Results) -> str:
    """The campaign's cells as `` `name`: load L at burstiness B, n repeats``, joined; what the plugin was measured in."""
    cells = res.csv(CELLS, ["cell", "load", "burstiness", "repeats_done_min"])
    return "; ".join(f"`{c['cell']}`: load {c['load']} at burstiness {c['burstiness']}, {c['repeats_done_min']} repeats"
                     for _, c in cells.iterrows())


@helper
def cell_arm(res: Results, cell: str) -> str:
    """The one arm a cell compares with stock FCFS (gains.csv), for a cell run with a single plugin setting."""
    gains = res.csv(GAINS, ["cell", "policy"])
    arms = sorted(set(gains.loc[gains["cell"] == cell, "policy"]))
    if len(arms) != 1:
        res.fail(GAINS, f"cell {cell} compares {len(arms)} arms with stock FCFS ({arms}), not one")
    return str(arms[0])
