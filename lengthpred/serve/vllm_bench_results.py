"""What a `vllm bench serve` campaign measured (lengthpred.serve.vllm_bench_campaign), read back from its files.

Per request, from vLLM's own per-request detail: arrival = the client's send time, first token = arrival + TTFT,
finish = arrival + E2E latency, output tokens = vLLM's count; per-token latency = E2E / output tokens. Per run,
the project's latency statistics (`lengthpred.serve.metrics.latency_metrics`: means, medians, p99 over the run's
requests) beside vLLM's own (its mean/median/p99 TTFT, TPOT, ITL and E2E in milliseconds).

Gains of each arm over a baseline arm, paired by repeat (`paired_gains`: the pooled ratio 1 − mean(arm) /
mean(baseline) over repeats, the exact sign-flip p, a paired bootstrap interval with ten or more repeats, the
range when one request is left out), plus the two statistics a pooled ratio can hide: the median over repeats of
the per-repeat gain 1 − arm/baseline, and the range of the pooled ratio when one whole repeat is left out.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.metrics import spearman_or_nan
from lengthpred.serve.metrics import SLO, latency_metrics
from lengthpred.serve.paired import RUN_KEYS, paired_gains, pooled_gain

RUN = re.compile(r"r(?P<k>\d+)_(?P<arm>[a-z0-9@-]+)\.json\.gz$")
VLLM_STATS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
              "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
              "request_throughput", "output_throughput", "duration", "completed", "failed", "total_output_tokens")
HEADLINES = ("per_token_latency_mean", "per_token_latency_p50", "ttft_mean", "ttft_p50", "jct_mean", "jct_p50",
             "jct_p99", "tpot_mean")


def load_cell(folder: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(manifest, per-request rows, per-run vLLM statistics, per-run plugin rows) of one cell folder."""
    folder = Path(folder)
    mpath = folder / "manifest.json"
    if not mpath.is_file():
        raise DataError(f"{folder} is not a vllm bench campaign folder (no manifest.json)")
    manifest = json.loads(mpath.read_text())
    load = float(manifest["cell"]["load"])
    batch = int(manifest.get("server", {}).get("max_num_seqs", 0)) or None
    reqs, runs, plugin = [], [], []
    for path in sorted((folder / "runs").glob("r*_*.json.gz")):
        m = RUN.search(path.name)
        if m is None:
            continue
        k, arm = int(m["k"]), m["arm"]
        try:
            with gzip.open(path, "rt") as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: not a readable vLLM result JSON ({e})") from None
        reqs.append(_requests(res, arm, load, k, path))
        step, n_full = full_batch_step_ms(res, batch)
        runs.append({"arm": arm, "repeat": k} | {s: res.get(s, math.nan) for s in VLLM_STATS}
                    | {"step_ms_full_batch": step, "full_batch_intervals": n_full})
        plugin.append(_plugin(path, arm, k))
    if not reqs:
        raise DataError(f"{folder}: no runs yet (runs/r*_<arm>.json.gz)")
    return manifest, pd.concat(reqs, ignore_index=True), pd.DataFrame(runs), pd.DataFrame([p for p in plugin if p])


def _requests(res: dict, arm: str, load: float, k: int, path: Path) -> pd.DataFrame:
    try:
        start = np.asarray(res["start_times"], float)
        ttft = np.asarray(res["ttfts"], float)
        lat = np.asarray(res["latencies"], float)
        out = np.asarray(res["output_lens"], float)
        err = [bool(e) for e in res.get("errors", [""] * len(start))]
    except KeyError as e:
        raise DataError(f"{path}: vLLM's result lacks per-request detail {e} (run with --save-detailed)") from None
    t0 = float(np.min(start)) if len(start) else 0.0
    arrival = start - t0
    failed = np.asarray(err, bool)
    return pd.DataFrame({"rid": [f"r{k:02d}-{i}" for i in range(len(start))], "policy": arm, "predictor": "-",
                         "load": load, "seed": k, "arrival": arrival,
                         "first_token": np.where(failed, np.nan, arrival + ttft),
                         "finish": np.where(failed, np.nan, arrival + lat), "output_tokens": out,
                         "status": np.where(failed, "rejected", "finished")})


def full_batch_step_ms(res: dict, batch: int | None) -> tuple[float, int]:
    """The run's engine step time at a full batch, from the client's token times alone: the median inter-token
    gap (ms) over the gaps during which at least `batch` requests were between their first and last token (the
    batch cap, so the batch was full), and how many such gaps there were. Arms that serve identical prompts should
    step equally fast at equal batch: a difference between arms is the machine's drift, not the policy's (a
    parked request's one long gap is among them, but the median is ruled by the running requests' steps)."""
    if not batch:
        return math.nan, 0
    try:
        start, ttft, itls = res["start_times"], res["ttfts"], res["itls"]
    except KeyError:
        return math.nan, 0
    errs = res.get("errors", [""] * len(start))
    first, last, gaps = [], [], []
    for s0, t, gap, e in zip(start, ttft, itls, errs, strict=False):
        if e or not gap:
            continue
        times = float(s0) + float(t) + np.concatenate([[0.0], np.cumsum(np.asarray(gap, float))])
        first.append(times[0])
        last.append(times[-1])
        gaps.append(np.column_stack([times[:-1], times[1:]]))
    if not gaps:
        return math.nan, 0
    g = np.concatenate(gaps)
    mid = g.mean(axis=1)
    active = np.searchsorted(np.sort(first), mid, side="right") - np.searchsorted(np.sort(last), mid, side="left")
    full = (g[:, 1] - g[:, 0])[active >= batch]
    return (float(np.median(full)) * 1e3 if len(full) else math.nan), int(len(full))


def _plugin(path: Path, arm: str, k: int) -> dict:
    stats = path.with_name(path.name.replace(".json.gz", ".stats.json"))
    log = path.with_name(path.name.replace(".json.gz", ".requests.jsonl"))
    if not stats.is_file():
        return {}
    row = {"arm": arm, "repeat": k} | json.loads(stats.read_text())
    if log.is_file():
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        pred = np.array([x["predicted"] if x["predicted"] is not None else np.nan for x in lines], float)
        true = np.array([x["output_tokens"] for x in lines], float)
        ok = np.isfinite(pred)
        row |= {"n_logged": len(lines), "n_predicted": int(ok.sum()),
                "spearman": spearman_or_nan(pred[ok], true[ok]) if ok.sum() > 2 else math.nan,
                "yields_per_request": float(np.mean([x["yields"] for x in lines])) if lines else math.nan}
    return row


def run_metrics(requests: pd.DataFrame, slo: SLO | None = None) -> pd.DataFrame:
    """Tidy (policy, predictor, load, seed, metric, value) rows, one set per run."""
    slo = slo or SLO()
    rows = []
    for key, r in requests.groupby(RUN_KEYS, sort=True):
        m = latency_metrics(r["arrival"], r["first_token"], r["finish"], r["output_tokens"], r["status"] == "rejected",
                            end=float(np.nanmax(r["finish"])) if r["finish"].notna().any() else 0.0, slo=slo)
        rows += [(*key, name, value) for name, value in m.items()]
    return pd.DataFrame(rows, columns=[*RUN_KEYS, "metric", "value"])


def repeat_gains(runs: pd.DataFrame, baseline: str, metrics: tuple[str, ...] = HEADLINES) -> pd.DataFrame:
    """Per (arm, metric): the median over repeats of 1 − arm/baseline, and the pooled ratio's range with one
    repeat left out."""
    wide = runs.pivot_table(index=["policy", "seed"], columns="metric", values="value")
    rows = []
    for arm in sorted(set(runs["policy"]) - {baseline}):
        for m in metrics:
            if m not in wide.columns:
                continue
            seeds = sorted(set(wide.loc[baseline].index) & set(wide.loc[arm].index))
            f = np.array([wide.loc[(baseline, s), m] for s in seeds], float)
            x = np.array([wide.loc[(arm, s), m] for s in seeds], float)
            per = 1 - x / f
            loro = [pooled_gain(np.delete(f, i), np.delete(x, i)) for i in range(len(seeds))] if len(seeds) > 1 else []
            rows.append({"arm": arm, "metric": m, "n": len(seeds), "median_repeat_gain": float(np.nanmedian(per)),
                         "repeats_better": int(np.sum(per > 0)), "loro_low": float(np.nanmin(loro)) if loro else math.nan,
                         "loro_high": float(np.nanmax(loro)) if loro else math.nan})
    return pd.DataFrame(rows)


def cell_gains(requests: pd.DataFrame, baseline: str, slo: SLO | None = None,
               metrics: tuple[str, ...] = HEADLINES) -> pd.DataFrame:
    """`paired_gains` over the baseline arm joined with `repeat_gains`."""
    slo = slo or SLO()
    runs = run_metrics(requests, slo)
    g = paired_gains(runs, requests, slo, metrics=metrics, baseline=baseline)
    r = repeat_gains(runs, baseline, metrics)
    return g.merge(r, left_on=["policy", "metric"], right_on=["arm", "metric"], how="left").drop(columns=["arm", "n_y"]
                                                                                              ).rename(columns={"n_x": "n"})
