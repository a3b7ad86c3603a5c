"""SJF's cost to long requests, and an aging variant that bounds it, compared on the same simulated runs.

Each stored (repeat, load) of a serving comparison is one workload: the FCFS run's requests (arrival, prompt
tokens, replayed length) and, for the predicting policies, the predictions the live predictor made for the
same requests (the predicted-SJF run's `prediction`, matched by the request's position in the run). Every
policy of `starvation_policies` serves that workload in the simulator on the run's profile, without the live
predictor's cost, so only the order differs. Reported per run: per-token latency mean and median, end-to-end
mean, p99 and longest, and the longest wait for a first token (`lengthpred.serve.metrics`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.policies import make_policy
from lengthpred.sched.core.simulator import simulate
from lengthpred.sched.core.workload import Workload
from lengthpred.sched.sweep.pool import CLAIRVOYANT, NO_PREDICTOR
from lengthpred.serve.metrics import SLO, latency_metrics

METRICS = ("per_token_latency_mean", "per_token_latency_p50", "jct_mean", "jct_p99", "jct_max", "ttft_max")


def starvation_policies(weights: Sequence[float]) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, simulator policy, keywords): FCFS, SJF and SJF with aging at each weight, on the predictions
    and on the replayed lengths (oracle)."""
    out: list[tuple[str, str, dict[str, Any]]] = [("fcfs", "fcfs", {}), ("sjf", "sjf", {})]
    out += [(f"sjf-aging w={w:g}", "sjf-aging", {"weight": float(w)}) for w in weights]
    out += [("oracle-sjf", "oracle-sjf", {})]
    out += [(f"oracle-sjf-aging w={w:g}", "oracle-sjf-aging", {"weight": float(w)}) for w in weights]
    return out


POINT_POLICIES = ("sjf", "sjf-aging")  # the runs whose predictions the starvation replays read

def _index(r: pd.DataFrame) -> pd.Series:
    return r["rid"].astype(str).str.rsplit("-", n=1).str[-1].astype(int)


def compare(requests: pd.DataFrame, profile: HardwareProfile, policies: Sequence[tuple[str, str, dict[str, Any]]],
            sim: dict[str, Any] | None = None, slo: SLO | None = None) -> pd.DataFrame:
    """Tidy rows (load, seed, policy, metric, value) of every policy on every stored (repeat, load) workload;
    predicting policies are left out of a workload that has no predictions."""
    rows = []
    for (load, seed), g in requests.groupby(["load", "seed"], sort=True):
        # the workload (arrivals, prompts, lengths) is the same under every policy of a repeat: FCFS's copy, else
        # the first policy's
        pols = sorted(set(g["policy"]))
        base = g[g["policy"] == ("fcfs" if "fcfs" in pols else pols[0])]
        base = base.assign(_k=_index(base)).sort_values("_k")
        base = base[(base["status"] != "rejected").to_numpy()]
        # the point readout's predictions (sjf, sjf-aging), never another key (sjf-dist / sjf-tie's, on a
        # different scale)
        pr = g[g["policy"].isin(POINT_POLICIES) & ~g["predictor"].isin([NO_PREDICTOR, CLAIRVOYANT])
               & g["prediction"].notna()]
        pred = pr.assign(_k=_index(pr)).groupby("_k")["prediction"].first() if len(pr) else None
        order = np.argsort(base["arrival"].to_numpy(float), kind="stable")
        b = base.iloc[order]
        wl = Workload(b["arrival"].to_numpy(float), b["prompt_tokens"].to_numpy(), np.maximum(b["target_tokens"].to_numpy(), 1))
        p = pred.reindex(b["_k"]).to_numpy(float) if pred is not None else None
        for label, name, kw in policies:
            pol = make_policy(name, **kw)
            if pol.needs_prediction and (p is None or not np.isfinite(p).all()):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = simulate(wl, profile, pol, p if pol.needs_prediction else None,
                               **{"max_preemptions": None, "horizon": math.inf, **(sim or {})})
            m = latency_metrics(res.arrival, res.first_token, res.finish, res.output, res.rejected,
                                end=float(res.end_time), slo=slo or SLO())
            rows += [(float(load), int(seed), label, k, float(m[k])) for k in METRICS]
    return pd.DataFrame(rows, columns=["load", "seed", "policy", "metric", "value"])


def table(runs: pd.DataFrame) -> str:
    """Markdown: per (load, policy), means over repeats of each run's statistic; the longest ones are the
    longest over every repeat."""
    if runs.empty:
        return "(no stored workload to compare on)"
    head = ["load", "policy", "ptl mean (s/tok)", "ptl median", "E2E mean (s)", "E2E p99", "longest E2E",
            "longest wait for a first token (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {lab: i for i, lab in enumerate(dict.fromkeys(runs["policy"]))}
    w = runs.pivot_table(index=["load", "policy", "seed"], columns="metric", values="value").reset_index()
    for (load, pol), g in sorted(w.groupby(["load", "policy"]), key=lambda x: (x[0][0], order[x[0][1]])):
        cells = [f"{g['per_token_latency_mean'].mean():.3f}", f"{g['per_token_latency_p50'].mean():.3f}",
                 f"{g['jct_mean'].mean():.1f}", f"{g['jct_p99'].mean():.1f}", f"{g['jct_max'].max():.1f}",
                 f"{g['ttft_max'].max():.1f}"]
        lines.append(f"| {load:g} | {pol} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
