"""Is a calibration burst fit to trust? A burst timed while something else used the cores gives a profile
that misses real runs by 13-40%, and a plain fit says nothing (docs/log, "Serving on a real engine"; AUDIT "a timing fit made on a
busy machine").

`check_calibration` fits the burst's steps twice (NNLS, and the robust Huber fit of
`lengthpred.serve.profile_fit` that the simulator then uses: a stalled step cannot drag it) and checks four
things against `CheckBounds`:
- fit quality: the NNLS fit's R² (0.83 on the quiet committed burst; 0.25 on a busy one);
- spread: the robust spread (1.4826 × MAD) of measured / modelled step time around the robust fit (3.8% on
  the quiet burst): contention makes single steps slow at random;
- slow steps: the share of steps more than 1.5× their modelled time (0.5% on the quiet burst);
- re-measure: a second, short burst timed right after (`recheck`); its steps' measured / modelled time
  (`lengthpred.serve.fidelity.step_drift`) must lie within `max_shift` of 1: a machine whose speed changes
  between two bursts a few seconds apart will not hold it through the runs either.
A burst that fails any of them gets `ok = False` and one line saying which and by how much, followed by every
check's number (a spread over its bound beside a re-measure that held reads differently from one beside 30% slow
steps); the caller warns with that line or refuses (`on_fail`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.serve.engine import EngineLimits
from lengthpred.serve.fidelity import step_drift
from lengthpred.serve.profile_fit import ProfileFit, fit_profile, step_durations_kept

ON_FAIL = ("warn", "refuse", "off")


@dataclass(frozen=True)
class CheckBounds:
    min_r2: float = 0.6
    max_spread: float = 0.10  # robust relative spread of step time around the robust fit
    max_slow_share: float = 0.05  # steps over 1.5x their modelled time
    max_shift: float = 0.10  # |measured / modelled - 1| of the re-measure burst
    on_fail: str = "warn"  # warn | refuse | off

    def __post_init__(self) -> None:
        if self.on_fail not in ON_FAIL:
            raise DataError(f"calibration check on_fail={self.on_fail!r}; valid: {', '.join(ON_FAIL)}")


@dataclass
class CalibrationCheck:
    ok: bool
    reason: str  # one line: what failed and by how much, or what passed
    r2: float  # of the NNLS fit
    r2_robust: float
    spread: float
    slow_share: float
    shift: float  # re-measure burst: measured / modelled − 1 on the robust profile (NaN: none)
    fit: ProfileFit  # NNLS
    robust: ProfileFit

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "r2": self.r2, "r2_robust": self.r2_robust,
                "spread": self.spread, "slow_share": self.slow_share, "shift": self.shift,
                "robust_profile": self.robust.profile.to_dict()}


def _ratios(steps: pd.DataFrame, fit: ProfileFit, skip: int) -> np.ndarray:
    d, m = step_durations_kept(steps, fit.profile, skip)
    return d / m


def check_calibration(steps: pd.DataFrame, limits: EngineLimits, bounds: CheckBounds = CheckBounds(), *,
                      recheck: pd.DataFrame | None = None, skip: int = 2, name: str = "fitted",
                      source: str = "", measured_shift: float = math.nan) -> CalibrationCheck:
    """The checks above on a calibration burst's steps (`RunLog.steps`), and a re-measure burst's if given;
    without one, `measured_shift` is a re-measure's shift recorded earlier (a stored run checked again)."""
    fit = fit_profile([steps], limits, name=name, skip=skip, source=source)
    rob = fit_profile([steps], limits, name=name, skip=skip, source=(source + " (robust Huber fit)").strip(),
                      robust=True)
    r = _ratios(steps, rob, skip)
    spread = 1.4826 * float(np.median(np.abs(r - np.median(r)))) if len(r) else math.nan
    slow = float(np.mean(r > 1.5)) if len(r) else math.nan
    shift = step_drift(recheck, rob.profile, skip) - 1 if recheck is not None and len(recheck) else measured_shift
    why = []
    if not fit.r2 >= bounds.min_r2:
        why.append(f"R² {fit.r2:.2f} < {bounds.min_r2:g}")
    if not spread <= bounds.max_spread:
        why.append(f"step-time spread {100 * spread:.1f}% > {100 * bounds.max_spread:g}%")
    if not slow <= bounds.max_slow_share:
        why.append(f"{100 * slow:.1f}% of steps over 1.5x their modelled time (> {100 * bounds.max_slow_share:g}%)")
    if math.isfinite(shift) and abs(shift) > bounds.max_shift:
        why.append(f"a re-measure ran {100 * shift:+.1f}% off the fit (> ±{100 * bounds.max_shift:g}%)")
    base = (f"R² {fit.r2:.2f} (robust {rob.r2:.2f}), spread {100 * spread:.1f}%, {100 * slow:.1f}% slow steps"
            + (f", re-measure {100 * shift:+.1f}%" if math.isfinite(shift) else ", no re-measure"))
    reason = (f"calibration burst looks busy (another process on the cores?): {'; '.join(why)} ({base})" if why
              else f"calibration burst passes: {base}")
    return CalibrationCheck(not why, reason, fit.r2, rob.r2, spread, slow, shift, fit, rob)


def run_drifts(runs: Sequence[tuple[dict, pd.DataFrame]], fit: ProfileFit, skip: int, bound: float) -> pd.DataFrame:
    """The engine's step-time drift from the calibration profile in each run: (key, steps) pairs → one row
    per run with `drift` (measured / modelled step time) and `drifting` (|drift − 1| > bound)."""
    rows = []
    for key, steps in runs:
        d = step_drift(steps, fit.profile, skip)
        rows.append({**key, "drift": d, "drifting": bool(abs(d - 1) > bound)})
    return pd.DataFrame(rows)
