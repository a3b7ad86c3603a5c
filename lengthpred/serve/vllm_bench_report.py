"""Markdown tables of `vllm bench serve` campaign folders (lengthpred.serve.vllm_bench_results), every number
labelled with its unit: a statistic *per run* (over that run's requests), then its *median over repeats*; a gain
*per repeat* (1 − arm/baseline, paired), its *median over repeats*, the *pooled ratio* 1 − mean(arm)/mean(baseline)
over repeats, and its range with one repeat left out; claims counted by the exact sign-flip test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.serve.tables_cli import md_table
from lengthpred.serve.vllm_bench_results import cell_gains, load_cell, run_metrics

BASELINE = "stock-fcfs"
LABELS = {
    "per_token_latency_mean": "per-token latency, mean per run (s/token)",
    "per_token_latency_p50": "per-token latency, median per run (s/token)",
    "ttft_mean": "TTFT, mean per run (s)",
    "ttft_p50": "TTFT, median per run (s)",
    "jct_mean": "E2E, mean per run (s)",
    "jct_p50": "E2E, median per run (s)",
    "jct_p99": "E2E, p99 per run (s)",
    "tpot_mean": "TPOT, mean per run (s/token)",
}
VLLM_LABELS = {"total_output_tokens": "output tokens, sum per run (the work: natural answers differ between arms)",
               "mean_ttft_ms": "TTFT mean (ms)", "median_tpot_ms": "TPOT median (ms)", "mean_itl_ms": "ITL mean (ms)",
               "p99_e2el_ms": "E2E p99 (ms)", "request_throughput": "throughput (req/s)",
               "output_throughput": "output throughput (tok/s)"}


def _f(x: float, digits: int = 3) -> str:
    return "–" if x is None or not math.isfinite(float(x)) else f"{float(x):.{digits}g}"


def _pct(x: float) -> str:
    return "–" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):+.1f}%"


def cell_report(folder: Path, baseline: str = BASELINE) -> str:
    manifest, requests, vruns, plugin = load_cell(folder)
    cell = manifest["cell"]
    arms = [a["name"] for a in manifest["arms"]]
    cap = _capacity(folder)
    n_done = requests.groupby("policy")["seed"].nunique().to_dict()
    out = [f"### {cell['name']}: load {cell['load']:g} of capacity, burstiness {cell['burstiness']:g}\n",
           f"{cell['n_requests']} requests per run; repeats done per arm: "
           + ", ".join(f"{a} {n_done.get(a, 0)}" for a in arms)
           + f" (of {cell['repeats']}); capacity {_f(cap, 4)} req/s (median of {cell.get('capacity_bursts', '?')} "
           f"drained bursts, stock FCFS); vLLM {manifest.get('vllm', '?')}, commit {manifest.get('commit', '?')}, "
           f"started {str(manifest.get('started', ''))[:16]}.\n"]
    runs = run_metrics(requests)
    wide = runs.pivot_table(index=["policy", "seed"], columns="metric", values="value")
    rows = []
    for a in arms:
        if a not in wide.index.get_level_values(0):
            continue
        w = wide.loc[a]
        v = vruns[vruns["arm"] == a]
        rows.append([a] + [_f(np.nanmedian(w[m])) for m in LABELS if m in w.columns]
                    + [_f(np.nanmedian(v[k])) for k in VLLM_LABELS])
    head = ["arm"] + [LABELS[m] for m in LABELS if m in wide.columns] + [f"vLLM's {v}" for v in VLLM_LABELS.values()]
    out += ["**Each statistic per run, then its median over repeats** (the first eight from vLLM's per-request "
            "detail, the rest vLLM's own summary of the run):\n", md_table(head, rows)]
    steps = step_times(vruns, arms, baseline)
    if not steps.empty:
        out += [f"\n**Engine step time at a full batch** ({manifest.get('server', {}).get('max_num_seqs', '?')} "
                "requests between their first and last token; from the client's token times, median gap per run; "
                "the machine-drift check: arms serving the same prompts should step equally fast):\n",
                md_table(["arm", "step at a full batch, median per run, median over repeats (ms)",
                          f"÷ {baseline} in the same repeat, median over repeats", "÷ the same, min–max over repeats",
                          "full-batch gaps per run, median"],
                         [[r["arm"], _f(r["step_ms"]), _f(r["ratio_median"]),
                           f"{_f(r['ratio_min'])}–{_f(r['ratio_max'])}", f"{r['gaps']:.0f}"] for _, r in steps.iterrows()])]
    if baseline in arms and len(n_done) > 1:
        g = cell_gains(requests, baseline)
        rows = []
        for _, r in g.iterrows():
            rows.append([r["policy"], LABELS.get(r["metric"], r["metric"]), _pct(r["median_repeat_gain"]),
                         f"{int(r['repeats_better'])}/{int(r['n'])}", _f(r["p_value"], 2), _pct(r["gain"]),
                         f"[{_pct(r['loro_low'])}, {_pct(r['loro_high'])}]",
                         f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]" if math.isfinite(r["ci_low"]) else r["interval"],
                         f"[{_pct(r['loo_low'])}, {_pct(r['loo_high'])}]"])
        out += [f"\n**Gains over {baseline}, paired by repeat** (positive: lower latency than {baseline}; p: exact "
                "sign-flip test over repeats, two-sided):\n",
                md_table(["arm", "statistic", "median per-repeat gain", "repeats better", "p", "pooled ratio",
                          "pooled, one repeat left out", "pooled, 95% paired bootstrap", "pooled, one request left out"],
                         rows)]
    if len(plugin):
        rows = []
        for a in arms:
            p = plugin[plugin["arm"] == a]
            if p.empty:
                continue
            rows.append([a, str(int(p["predicted"].sum())), str(int(p["unpredictable"].sum())),
                         _f(np.nanmedian(p["spearman"]), 2), _f(np.nanmean(p["yields_per_request"]), 2),
                         str(int(p["kv_preempted"].sum())), _f(np.nanmedian(p["predict_ms_mean"]), 2),
                         _f(np.nanmedian(p["update_ms_mean"]), 2)])
        out += ["\n**The plugin at work** (sums over runs, or the median per run where marked):\n",
                md_table(["arm", "requests predicted", "unpredictable", "Spearman predicted vs served length, median "
                          "per run", "yields per request, mean", "KV preemptions of parked requests",
                          "predict ms, median per run", "RLS update ms, median per run"], rows)]
    if baseline in arms:
        out += [f"\n**The work each arm did** (natural answers: the same prompt, seed and sampling settings in every arm, "
                "but the batch's arithmetic differs, so answers can diverge; per repeat against the same request "
                f"under {baseline}, then the median over repeats):\n", _work(requests, arms, baseline)]
    out += ["\n**Per repeat: per-token latency, mean per run (s/token)**:\n", _per_repeat(wide, arms)]
    return "\n".join(out)


def step_times(vruns: pd.DataFrame, arms: list[str], baseline: str) -> pd.DataFrame:
    """Per arm: the full-batch step time (median per run, then over repeats) and its ratio to the baseline arm's
    in the same repeat (median, min, max over repeats)."""
    if "step_ms_full_batch" not in vruns or vruns["step_ms_full_batch"].isna().all():
        return pd.DataFrame()
    w = vruns.pivot_table(index="repeat", columns="arm", values="step_ms_full_batch")
    rows = []
    for a in arms:
        if a not in w.columns:
            continue
        ratio = (w[a] / w[baseline]).dropna() if baseline in w.columns else pd.Series(dtype=float)
        gaps = vruns.loc[vruns["arm"] == a, "full_batch_intervals"]
        rows.append({"arm": a, "step_ms": float(np.nanmedian(w[a])), "repeats": int(w[a].notna().sum()),
                     "ratio_median": float(ratio.median()) if len(ratio) else math.nan,
                     "ratio_min": float(ratio.min()) if len(ratio) else math.nan,
                     "ratio_max": float(ratio.max()) if len(ratio) else math.nan, "gaps": float(gaps.median())})
    return pd.DataFrame(rows)


def _work(requests: pd.DataFrame, arms: list[str], baseline: str) -> str:
    from lengthpred.metrics import spearman_or_nan

    rows = []
    base = requests[requests["policy"] == baseline].set_index(["seed", "rid"])["output_tokens"]
    for a in arms:
        r = requests[requests["policy"] == a].set_index(["seed", "rid"])["output_tokens"]
        both = pd.concat([base.rename("b"), r.rename("a")], axis=1, join="inner")
        if both.empty:
            continue
        per = both.groupby(level=0)
        rows.append([a, _f(np.median(per["a"].sum())), _f(np.median([spearman_or_nan(g["a"], g["b"]) for _, g in per]), 2),
                     f"{100 * float(np.median([(g['a'] == g['b']).mean() for _, g in per])):.0f}%"])
    return md_table(["arm", "output tokens, sum per run (median over repeats)",
                     f"Spearman of each request's length with {baseline}'s (median per repeat)",
                     f"requests with the same length as under {baseline} (median per repeat)"], rows)


def _per_repeat(wide: pd.DataFrame, arms: list[str]) -> str:
    m = "per_token_latency_mean"
    seeds = sorted(set(wide.index.get_level_values(1)))
    rows = []
    for s in seeds:
        row = [str(s)]
        for a in arms:
            row.append(_f(wide.loc[(a, s), m]) if (a, s) in wide.index else "–")
        rows.append(row)
    return md_table(["repeat"] + arms, rows)


def _capacity(folder: Path) -> float:
    import json

    p = Path(folder) / "capacity.json"
    return float(json.loads(p.read_text())["capacity_rps"]) if p.is_file() else math.nan


def report(folders: list[Path], baseline: str = BASELINE) -> str:
    return "\n\n".join(cell_report(f, baseline) for f in folders)
