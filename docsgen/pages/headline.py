"""The headline numbers the README and the home page show, each computed from committed rows and printed with
the statistic's unit in its label: which predictor is best against the baselines and the noise ceiling, what
predicted-SJF buys on the real vLLM engine (median and tail, counted by the exact sign-flip test), how well the
simulator forecasts it, and how long the make targets take."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from docsgen.numbers import Stat, minutes, parse_cell, pct, pct_interval
from docsgen.pages.serving import FIDELITY, FOLDER_INFO, GAIN_FIDELITY, GAINS
from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

T1 = f"{DATA}/t1-in-domain/bench_T1.csv"
PAIRED = f"{DATA}/t1-in-domain/bench_paired_seeds.numbers.csv"
TIMINGS = f"{DATA}/timings.csv"
TRACE = "data/reference/smollm2-135m/bench.jsonl"
HEADLINE_FOLDER = "serve_demo_engine10"  # the first ten-repeat folder: demo pool, Poisson, load 0.95, cap 4
SJF = ("sjf", "rls@1+engine")  # predicted-SJF on LEAP's readout of the engine's own prefill
P_CLAIM = 0.05


def _t1(res: Results) -> pd.DataFrame:
    df = res.csv(T1, columns=("Domain", "Head", "Spearman ↑", "Noise ceiling (estimate) ↑", "MAE of median (tokens) ↓"))
    return df[df["Domain"] == "all"].set_index("Head")


def _stat(res: Results, cell: str, what: str) -> Stat:
    s = parse_cell(cell)
    if s is None:
        res.fail(T1, f"{what}: {cell!r} is not a number")
    return s


@helper
def t1_stat(res: Results, head: str, column: str = "Spearman ↑") -> Stat:
    """A pooled bench T1 cell (480 test prompts) as a number with its 95% bootstrap interval over prompts."""
    t = _t1(res)
    if head not in t.index:
        res.fail(T1, f"no pooled row for head {head!r}")
    return _stat(res, t.loc[head, column], f"{head} {column}")


@helper
def best_heads(res: Results, k: int = 2) -> list[str]:
    """The `k` heads with the highest pooled test Spearman (first seed) in bench T1."""
    t = _t1(res)
    vals = {h: s.value for h in t.index if (s := parse_cell(t.loc[h, "Spearman ↑"])) is not None}
    return sorted(vals, key=vals.get, reverse=True)[:k]


@helper
def ceiling(res: Results) -> Stat:
    t = _t1(res)
    return _stat(res, t["Noise ceiling (estimate) ↑"].iloc[0], "noise ceiling")


@helper
def paired_vs_reference(res: Results, head: str, metric: str = "spearman") -> dict:
    """compare_seeds' paired difference of `head`'s seed mean against the reference head's (over the same
    480 prompts: 95% bootstrap interval, one-sided p), and the reference's name."""
    df = res.csv(PAIRED, columns=("head", "metric", "seed_mean", "diff_vs_reference", "ci_low", "ci_high", "p_value"),
                 dtype=None)
    ref = df[(df["metric"] == metric) & df["diff_vs_reference"].isna()]
    row = df[(df["metric"] == metric) & (df["head"] == head)]
    if len(ref) != 1 or len(row) != 1:
        res.fail(PAIRED, f"needs one reference row and one {head!r} row for {metric}")
    r = row.iloc[0]
    return {"reference": ref.iloc[0]["head"], "diff": Stat(r.diff_vs_reference, r.ci_low, r.ci_high, 3),
            "p": float(r.p_value), "n_seeds": int(r.n_seeds), "ref_seeds": int(ref.iloc[0]["n_seeds"])}


def _gains(res: Results) -> pd.DataFrame:
    return res.csv(GAINS, columns=("folder", "baseline", "policy", "predictor", "metric", "gain", "ci_low", "ci_high",
                                   "p_value", "n", "median_per_repeat"), dtype=None)


@helper
def serve_gain(res: Results, metric: str, folder: str = HEADLINE_FOLDER, policy: str = "sjf",
               baseline: str = "fcfs") -> dict:
    """One paired gain of the committed engine runs: pooled ratio, 95% paired bootstrap interval over repeats,
    exact sign-flip p, the median of the per-repeat gains and the number of repeats."""
    g = _gains(res)
    hit = g[(g["folder"] == folder) & (g["baseline"] == baseline) & (g["policy"] == policy) & (g["metric"] == metric)]
    if len(hit) != 1:
        res.fail(GAINS, f"{len(hit)} rows for {folder} {policy} over {baseline}, {metric} (needs one)")
    r = hit.iloc[0]
    return {"text": pct_interval(r.gain, r.ci_low, r.ci_high), "gain": float(r.gain), "p": float(r.p_value),
            "median": pct(r.median_per_repeat), "n": int(r.n)}


@helper
def serve_folder_facts(res: Results, folder: str = HEADLINE_FOLDER) -> dict:
    """The folder's workload and calibration (folders.csv) and its load (its gains' rows)."""
    info = res.csv(FOLDER_INFO, columns=("folder", "workload", "calibration", "repeats"))
    loads = sorted(set(_gains(res).query("folder == @folder")["load"]))
    return {**res.row(FOLDER_INFO, info, folder=folder).to_dict(), "load": ", ".join(f"{x:g}" for x in loads)}


@helper
def claims(res: Results) -> dict:
    """The thresholds the headline counts against: the exact test's level and the per-run fidelity goals."""
    from lengthpred.lab.fidelity_overview import MEAN_GOAL, P90_GOAL

    return {"p": f"{P_CLAIM:g}", "mean_goal": pct(MEAN_GOAL, signed=False), "p90_goal": pct(P90_GOAL, signed=False)}


@helper
def castillo_models(res: Results) -> int:
    """How many serving models T7 scores (rows of its summary table)."""
    path = f"{DATA}/t7-castillo/castillo_T7_summary.csv"
    return int(res.csv(path, columns=("Model",))["Model"].nunique())


@helper
def t1_n(res: Results) -> int:
    """How many test prompts the pooled T1 rows score."""
    t = _t1(res)
    if "n" not in t.columns:
        res.fail(T1, "no column 'n'")
    return int(str(t["n"].iloc[0]).replace(",", ""))


@helper
def sjf_counts(res: Results, metric: str = "per_token_latency_mean", baseline: str = "fcfs") -> dict:
    """Over the ten-repeat folders that ran predicted-SJF (engine readout) and `baseline`: how many show a gain
    (or a loss) on `metric` by the exact sign-flip test at p < 0.05, and the range of the pooled gains."""
    g = _gains(res)
    g = g[(g["baseline"] == baseline) & (g["policy"] == SJF[0]) & (g["predictor"] == SJF[1]) & (g["metric"] == metric)]
    if g.empty:
        res.fail(GAINS, f"no predicted-SJF rows over {baseline} for {metric}")
    sig = g["p_value"] < P_CLAIM
    return {"folders": int(g["folder"].nunique()), "gain": int((sig & (g["gain"] > 0)).sum()),
            "loss": int((sig & (g["gain"] < 0)).sum()), "low": pct(g["gain"].min()), "high": pct(g["gain"].max())}


@helper
def forecast(res: Results, replay: str = "fidelity") -> dict:
    """How the simulator's replay forecasts the engine's paired gains (`lengthpred.lab.gain_fidelity.gain_totals`
    over the cells with an interval) and how many runs meet the per-run goal."""
    from lengthpred.lab.gain_fidelity import gain_totals

    g = res.csv(GAIN_FIDELITY, columns=("replay", "folder", "inside", "diff", "ci_low", "sim_gain"), dtype=None)
    t = gain_totals([("all", g[g["replay"] == replay].drop(columns=["replay", "folder"]))])
    blob = res.json(FIDELITY)
    try:
        runs = [r["fidelity"] for r in blob["replays"][replay] if r["fidelity"]]
    except (KeyError, TypeError):
        res.fail(FIDELITY, f"no replay {replay!r}")
    return {**t, "runs": sum(r["runs"] for r in runs), "runs_meeting": sum(r["runs_meeting"] for r in runs),
            "median_abs_diff": f"{t['median_abs_diff']:.1f}"}


@helper
def capped_share(res: Results) -> dict:
    """How many sampled answers of the committed bench trace hit the generation cap (its header's counts)."""
    try:
        meta = json.loads(res.text(TRACE).split("\n", 1)[0])["meta"]
        n, capped, cap = int(meta["n_rows"]), int(meta["n_capped"]), int(meta["settings"]["max_new_tokens"])
    except (KeyError, ValueError, TypeError) as e:
        res.fail(TRACE, f"no meta header with n_rows, n_capped, settings.max_new_tokens ({e})")
    return {"share": pct(capped / n, signed=False), "cap": cap, "n": f"{n:,}", "prompts": f"{int(meta['n_prompts']):,}",
            "samples": int(meta["settings"]["num_samples"])}


@helper
def timing(res: Results, target: str, run: str = "cold", dated: bool = False) -> str:
    """The measured wall time of `make <target>`: one run as `20 min 47 s (one run)`, several as their range and
    count; `dated`: with the dates they were measured on."""
    t = res.csv(TIMINGS, columns=("target", "run", "seconds", "machine", "date"))
    rows = t[(t["target"] == f"make {target}") & t["run"].str.startswith(run)]
    if rows.empty:
        res.fail(TIMINGS, f"no measured {run} run of make {target}")
    try:
        s = rows["seconds"].astype(float)
    except ValueError:
        res.fail(TIMINGS, f"make {target}: seconds not a number")
    days = sorted(set(rows["date"]))
    when = f", {' and '.join(days)}" if dated else ""
    if len(s) == 1:
        return f"{minutes(s.iloc[0])} (one run{when})"
    return f"{minutes(s.min())} to {minutes(s.max())} (range over {len(s)} runs{when})"


@helper
def share(res: Results, a: float, b: float) -> str:
    """a / b as a percent (no sign): e.g. a head's Spearman as a share of the ceiling's point estimate."""
    return pct(a / b, signed=False) if b and math.isfinite(a) and math.isfinite(b) else "—"


@helper
def fmt_p(res: Results, p: float) -> str:
    """An exact test's p as the tables print it (two significant digits)."""
    return f"{p:.2g}" if np.isfinite(p) else "—"
