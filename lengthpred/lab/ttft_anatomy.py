"""Where the simulator's TTFT misses a real serve run replayed at the run's own speed (`scripts/serve_ttft_anatomy.py`).

Each run is replayed on the profile at its own measured speed (`at_speed` × `step_drift`) and its requests are
split: admitted at once (at the first step boundary after they entered) in both the real run and the replay, or
waited for a slot in either. `sensitivity`: how much 1% of step time moves a run's mean TTFT and JCT;
`window_spread`: how much the machine's speed wanders inside a run (`speed_windows`). `tracked_movers`: replayed
while tracking the engine's speed (`tracked_windows`, as `serve.speed_window_s`), how much of a run's TTFT error
its few requests with the largest first-token moves carry (a slot freed a moment earlier or later reorders a
priority queue, and a request that loses its place waits seconds).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.experiment import KEYS, ServeSettings
from lengthpred.serve.fidelity import at_speed, simulate_run, speed_windows, step_drift, tracked_windows
from lengthpred.serve.priority import ServePolicy, by_sim_policy
from lengthpred.serve.profile_fit import model_step_times, profile_from_dict
from lengthpred.serve.replay import STEP_COLUMNS
from lengthpred.serve.run_folder import require_run_folder


@dataclass
class StoredServe:
    """A stored serve run folder: every run's requests and steps, its calibration profile and settings."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    profile: HardwareProfile
    settings: ServeSettings

    def runs(self) -> Iterator[tuple[str, ServePolicy, pd.DataFrame, pd.DataFrame]]:
        """(the simulator policy's name, the serving policy, requests, steps) of each run, in stored order."""
        steps = dict(iter(self.steps.groupby(KEYS, sort=False)))
        for key, r in self.requests.groupby(KEYS, sort=False):
            st = steps.get(key, self.steps.iloc[:0])[STEP_COLUMNS].reset_index(drop=True)
            reqs = r.drop(columns=[*KEYS, "sim_first_token", "sim_finish"], errors="ignore").reset_index(drop=True)
            yield str(key[0]), by_sim_policy(str(key[0]), self.settings.aging_weight), reqs, st


def load_stored(run_dir: Path) -> StoredServe:
    """A serve run folder (`scripts/serve.py`'s output); DataError when it is not one."""
    require_run_folder(run_dir)
    config = json.loads((run_dir / "serve.json").read_text())["config"]
    settings = ServeSettings.from_mapping({k: v for k, v in config.items() if k != "out_dir"})
    return StoredServe(pd.read_parquet(run_dir / "serve_requests.parquet"),
                       pd.read_parquet(run_dir / "serve_steps.parquet"),
                       profile_from_dict(json.loads((run_dir / "profile.json").read_text())), settings)


def real_admission(requests: pd.DataFrame, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(start of the engine step that made each request's first token, whether that was the first step to start
    after the engine added it); NaN and False for a request without a first token."""
    ts, te = steps["t_start"].to_numpy(float), steps["t_end"].to_numpy(float)
    ft = requests["first_token"].to_numpy(float)
    ok = np.isfinite(ft) & (len(ts) > 0)
    made = np.clip(np.searchsorted(te, ft - 1e-9), 0, max(len(ts) - 1, 0))
    first = np.searchsorted(ts, requests["added"].to_numpy(float) - 1e-9)
    return np.where(ok, ts[made] if len(ts) else math.nan, math.nan), ok & (made <= first)


def sim_at_once(enter: np.ndarray, admit: np.ndarray, first_token: np.ndarray, decode_s: float) -> np.ndarray:
    """Whether the replay admitted each request at the first step boundary after it entered: it waited no longer
    than the step in flight then, a prefill step of the replay where one was (known exactly: [first_admit,
    first_token] of the requests it admitted) and else a step of at most `decode_s` seconds."""
    ok = np.isfinite(admit) & np.isfinite(first_token)
    order = np.argsort(admit[ok], kind="stable")
    s, e = admit[ok][order], first_token[ok][order]
    j = np.searchsorted(s, enter, side="right") - 1
    end = np.where(j >= 0, e[np.maximum(j, 0)] if len(e) else math.nan, math.nan)
    limit = np.where(end > enter, end - enter, decode_s)
    return np.isfinite(admit) & (admit - enter <= limit + 1e-9)


def anatomy(requests: pd.DataFrame, steps: pd.DataFrame, profile: HardwareProfile, policy: ServePolicy,
            sim: dict | None = None, skip: int = 2) -> pd.DataFrame:
    """Per request of one run, real (`_real`) and replayed at the run's own speed (`_sim`): the wait from arrival
    to the step that made its first token (`wait`), that step (`step`), `at_once` (admitted at once in both) and
    `err` (simulated − real first token, s)."""
    prof = at_speed(profile, step_drift(steps, profile, skip))
    simr = simulate_run(requests, policy, prof, sim)
    staged = bool(requests["prefill_first"].any()) if "prefill_first" in requests.columns else False
    enter = requests["arrival" if staged else "ready"].to_numpy(float)
    small = (steps["batch"].to_numpy() > 0) & (steps["prefill_tokens"].to_numpy() <= profile.block_size)
    decode_s = float(model_step_times(steps[small], prof).max()) if small.any() else 0.0
    admit, once = real_admission(requests, steps)
    sa, sf = simr["first_admit"].to_numpy(float), simr["first_token"].to_numpy(float)
    a, ft = requests["arrival"].to_numpy(float), requests["first_token"].to_numpy(float)
    return pd.DataFrame({"at_once": once & sim_at_once(enter, sa, sf, decode_s), "wait_real": admit - a,
                         "wait_sim": sa - a, "step_real": ft - admit, "step_sim": sf - sa, "err": sf - ft})


def sensitivity(requests: pd.DataFrame, steps: pd.DataFrame, profile: HardwareProfile, policy: ServePolicy,
                sim: dict | None = None, skip: int = 2, pct: float = 1.0) -> tuple[float, float]:
    """Signed change of a run's simulated mean TTFT and mean JCT, relative to the real run's, per `pct`% more step
    time: replayed at its own speed × (1 ± pct/100), half the difference (positive: slower steps, longer waits)."""
    d, a = step_drift(steps, profile, skip), requests["arrival"]
    real = ((requests["first_token"] - a).mean(), (requests["finish"] - a).mean())
    up, down = (simulate_run(requests, policy, at_speed(profile, d * (1 + s * pct / 100)), sim) for s in (1, -1))
    ttft, jct = (float(((up[c] - a).mean() - (down[c] - a).mean()) / 2 / r)
                 for c, r in zip(("first_token", "finish"), real, strict=True))
    return ttft, jct


def window_spread(steps: pd.DataFrame, profile: HardwareProfile, window_s: float, skip: int = 2) -> float:
    """Standard deviation of measured / modelled step time over windows of `window_s` s inside a run
    (`speed_windows`), relative to the run's whole ratio (`step_drift`); NaN with fewer than two windows."""
    f = np.array([x for _, _, x in speed_windows(steps, profile, window_s, skip)])
    return float(np.std(f, ddof=1) / step_drift(steps, profile, skip)) if len(f) > 1 else math.nan


def tracked_movers(requests: pd.DataFrame, steps: pd.DataFrame, profile: HardwareProfile, policy: ServePolicy,
                   sim: dict | None = None, skip: int = 2, window_s: float = 2.0, start: float = 1.0,
                   k: int = 2) -> dict[str, float]:
    """One run replayed while tracking its speed over `window_s` s windows (`tracked_windows` from `start`, e.g.
    the previous run's drift): the signed relative error of its mean TTFT (`ttft_tracked`), the same without the
    `k` requests whose first token moved most either way (`ttft_tracked_wo_movers`), and those requests' share
    of the run's summed |first-token error| (`movers_share`)."""
    slow = tracked_windows(steps, profile, window_s, skip, start)
    simr = simulate_run(requests, policy, profile, sim, slowdown=slow)
    real = (requests["first_token"] - requests["arrival"]).to_numpy(float)
    got = (simr["first_token"] - simr["arrival"]).to_numpy(float)
    ok = np.isfinite(real) & np.isfinite(got)
    real, got = real[ok], got[ok]
    if len(real) <= k:
        return {"ttft_tracked": math.nan, "ttft_tracked_wo_movers": math.nan, "movers_share": math.nan}
    err = np.abs(got - real)
    keep = np.ones(len(real), bool)
    keep[np.argsort(-err, kind="stable")[:k]] = False
    return {"ttft_tracked": float(got.mean() / real.mean() - 1),
            "ttft_tracked_wo_movers": float(got[keep].mean() / real[keep].mean() - 1),
            "movers_share": float(err[~keep].sum() / err.sum()) if err.sum() > 0 else 0.0}


def summarize(stored: StoredServe, window_s: float = 10.0, tracked_s: float = 2.0
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every request's `anatomy` row, one row per run with its `sensitivity`, `window_spread` and
    `tracked_movers` at `tracked_s` s windows, each run starting from the previous run's drift as the serve
    stage's tracking does), both with the run's policy."""
    s, per_req, per_run, prev = stored.settings, [], [], 1.0
    for name, pol, reqs, st in stored.runs():
        per_req.append(anatomy(reqs, st, stored.profile, pol, s.sim, s.fit_skip).assign(policy=name))
        ttft, jct = sensitivity(reqs, st, stored.profile, pol, s.sim, s.fit_skip)
        start = prev if math.isfinite(prev) and prev > 0 else 1.0
        movers = tracked_movers(reqs, st, stored.profile, pol, s.sim, s.fit_skip, tracked_s, start)
        prev = step_drift(st, stored.profile, s.fit_skip)
        per_run.append({"policy": name, "ttft": ttft, "jct": jct,
                        "window_sd": window_spread(st, stored.profile, window_s, s.fit_skip)} | movers)
    return pd.concat(per_req, ignore_index=True), pd.DataFrame(per_run)
