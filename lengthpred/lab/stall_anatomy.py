"""Where a prefill-first run's yielded decodes stall, real against the simulator (`scripts/serve_stall_anatomy.py`).

Under prefill-first serving (the engine readout, `fcfs-pf`) a decode that cannot keep its slot when its prefill
ends yields it and waits for one: its stall runs from its first token to its next (`resumed`), and its TPOT
spreads the stall over its length − 1 tokens, so a short answer's TPOT is mostly its stall. Each run is replayed
at its own measured speed (one number per run, `step_drift`) and at its speed over windows (`speed_windows`, one
number per window, in sample). Per decode: whether it yielded in the run and in each replay, and its stall in
each. Per run: the tokens the engine re-prefilled for its yielded decodes against the simulator's model of them
(P + 1 − block_size·⌊P / block_size⌋ per yield: what the prompt's full KV blocks, kept by prefix caching, do not
hold), the measured / modelled time (at the run's drift) of the steps that ended a stall, and TPOT's mean error
in both replays.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lengthpred.lab.ttft_anatomy import StoredServe
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.fidelity import at_speed, simulate_run, speed_windows, step_drift
from lengthpred.serve.priority import ServePolicy
from lengthpred.serve.profile_fit import model_step_times, step_durations

REPLAYS = ("own", "win")  # at the run's own speed; at its speed over windows


def _replays(requests: pd.DataFrame, steps: pd.DataFrame, profile: HardwareProfile, policy: ServePolicy,
             sim: dict | None, skip: int, window_s: float) -> dict[str, pd.DataFrame]:
    own = simulate_run(requests, policy, at_speed(profile, step_drift(steps, profile, skip)), sim)
    win = simulate_run(requests, policy, profile, sim, slowdown=speed_windows(steps, profile, window_s, skip))
    return {"own": own, "win": win}


def _tpot(r: pd.DataFrame) -> np.ndarray:
    n = r["target_tokens"].to_numpy(float)
    return (r["finish"].to_numpy(float) - r["first_token"].to_numpy(float)) / (n - 1)


def anatomy(requests: pd.DataFrame, steps: pd.DataFrame, profile: HardwareProfile, policy: ServePolicy,
            sim: dict | None = None, skip: int = 2, window_s: float = 10.0) -> tuple[pd.DataFrame, dict]:
    """(one row per finished decode of the run, i.e. an answer of 2 tokens or more: `yielded_<x>`, `stall_<x>`,
    `tpot_<x>` for x in real / own / win; the run's row: tail tokens, steps that ended a stall, TPOT mean
    errors). A stall is NaN where that side did not yield."""
    rep = _replays(requests, steps, profile, policy, sim, skip, window_s)
    keep = ((requests["status"] == "finished") & (requests["target_tokens"] > 1)).to_numpy()
    out = {}
    for name, r in (("real", requests), *rep.items()):
        split = r["split"].to_numpy(bool) if "split" in r.columns else np.zeros(len(r), bool)
        res = r["resumed"].to_numpy(float) if "resumed" in r.columns else np.full(len(r), math.nan)
        out[f"yielded_{name}"] = split[keep]
        out[f"stall_{name}"] = np.where(split, res - r["first_token"].to_numpy(float), math.nan)[keep]
        out[f"tpot_{name}"] = _tpot(r)[keep]
    per_req = pd.DataFrame(out)
    run = {"decodes": int(keep.sum()), **tail_check(requests, steps, profile, skip)}
    for name in REPLAYS:
        real, simd = np.nanmean(per_req["tpot_real"]), np.nanmean(per_req[f"tpot_{name}"])
        run[f"tpot_err_{name}"] = float(simd / real - 1) if real > 0 else math.nan
    return per_req, run


def tail_check(requests: pd.DataFrame, steps: pd.DataFrame, profile: HardwareProfile, skip: int = 2) -> dict:
    """The engine's re-prefill of a run's yielded decodes against the simulator's model: `tail_real` (prefilled
    tokens over the run less every prompt's first prefill), `tail_model` (the model's tail per yield),
    `stall_steps` (steps that ended a stall: they made a yielded decode's next token) and `stall_step_ratio`
    (their measured / modelled seconds, the model at the run's drift; NaN with none). Every request that got
    a first token was prefilled once in full."""
    fin = requests[np.isfinite(requests["first_token"].to_numpy(float))]  # every request the engine prefilled
    split = fin["split"].to_numpy(bool) if "split" in fin.columns else np.zeros(len(fin), bool)
    p = fin["prompt_tokens"].to_numpy(np.int64)
    bs = profile.block_size
    model = int((p[split] + 1 - bs * (p[split] // bs)).sum())
    real = int(steps["prefill_tokens"].sum() - p.sum()) if len(steps) else 0
    res = fin["resumed"].to_numpy(float)[split] if split.any() and "resumed" in fin.columns else np.zeros(0)
    te = steps["t_end"].to_numpy(float)
    made = np.unique(np.clip(np.searchsorted(te, res[np.isfinite(res)] - 1e-9), 0, max(len(te) - 1, 0)))
    made = made[made >= skip]
    d, m = step_durations(steps), model_step_times(steps, profile) * step_drift(steps, profile, skip)
    ratio = float(d[made].sum() / m[made].sum()) if len(made) and m[made].sum() > 0 else math.nan
    return {"tail_real": real, "tail_model": model, "stall_steps": len(made), "stall_step_ratio": ratio}


def summarize(stored: StoredServe, window_s: float = 10.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every decode's `anatomy` row, one row per run), both with the run's policy and index, for the runs served
    prefill first."""
    s, per_req, per_run = stored.settings, [], []
    for k, (name, pol, reqs, st) in enumerate(stored.runs()):
        if "prefill_first" not in reqs.columns or not reqs["prefill_first"].any():
            continue
        req, run = anatomy(reqs, st, stored.profile, pol, s.sim, s.fit_skip, window_s)
        per_req.append(req.assign(policy=name, run=k))
        per_run.append({"policy": name, "run": k, **run})
    if not per_run:
        return pd.DataFrame(), pd.DataFrame()
    return pd.concat(per_req, ignore_index=True), pd.DataFrame(per_run)
