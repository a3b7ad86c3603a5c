"""Windows of a real serving trace as simulation workloads: its arrival process and its lengths.

Seed k replays window k: requests [offset + k·n, offset + (k+1)·n) of the trace, in trace order, so seeds
are disjoint stretches of real traffic (independent replicates for the intervals over seeds), never a
resample. A trace too short for the windows asked is refused with its size, never recycled.

Arrivals are scaled by one constant per window and load, so that the window's mean rate is the offered
load times the server's capacity (`lengthpred.sched.core.workload.capacity`) on the chosen hardware profile. A
constant scale keeps the shape of the arrival process: bursts, lulls, ties (Mooncake logs arrivals in 3 s
ticks) and the coefficient of variation of the inter-arrival gaps, which `window_stats` reports before
and after scaling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.workload import capacity, scale_to_rate

__all__ = ["TraceWindow", "interarrival_cv", "scale_to_rate", "trace_windows", "window_stats"]


@dataclass
class TraceWindow:
    """One stretch of a trace; arrays aligned, arrival in seconds since the window's first request."""

    trace: str
    index: int  # window number (seed k replays window k)
    first: int  # the trace row of the window's first request (0-based)
    arrival: np.ndarray  # [n] float s, nondecreasing, arrival[0] == 0
    prompt: np.ndarray  # [n] int tokens
    output: np.ndarray  # [n] int tokens >= 1

    def __len__(self) -> int:
        return len(self.output)


def trace_windows(df: pd.DataFrame, name: str, *, n_requests: int, n_windows: int,
                  offset: int = 0) -> list[TraceWindow]:
    """`n_windows` consecutive windows of `n_requests` from row `offset` of a loaded trace
    (`lengthpred.data.serving_traces.load_trace`'s frame)."""
    if n_requests < 2 or n_windows < 1 or offset < 0:
        raise ConfigError(f"trace windows need n_requests >= 2, n_windows >= 1 and offset >= 0; got "
                          f"{n_requests}, {n_windows}, {offset}")
    need = offset + n_windows * n_requests
    if need > len(df):
        raise DataError(f"trace {name} has {len(df)} requests; {n_windows} windows of {n_requests} from row "
                        f"{offset} need {need}: ask for fewer requests or seeds")
    t = df["arrival_s"].to_numpy(float)
    out = []
    for k in range(n_windows):
        a, b = offset + k * n_requests, offset + (k + 1) * n_requests
        arr = t[a:b] - t[a]
        if not arr[-1] > 0:
            raise DataError(f"trace {name}: rows {a + 1}-{b} all arrive at one instant; no arrival process to scale")
        out.append(TraceWindow(name, k, a, arr, df["prompt_tokens"].to_numpy(np.int64)[a:b],
                               df["output_tokens"].to_numpy(np.int64)[a:b]))
    return out


def interarrival_cv(arrival: np.ndarray) -> float:
    """Coefficient of variation (sd / mean) of the gaps between consecutive arrivals; 1 for Poisson."""
    g = np.diff(np.asarray(arrival, dtype=float))
    return float(g.std() / g.mean()) if len(g) and g.mean() > 0 else float("nan")


def window_stats(windows: list[TraceWindow], profile: HardwareProfile, loads: list[float],
                 watermark: float = 0.01) -> pd.DataFrame:
    """One row per (window, load): the trace's own rate and inter-arrival CV, the server's capacity for the
    window's lengths, the time scale applied (simulated seconds per trace second), the CV after scaling,
    and how many requests cannot fit in KV memory even alone (the simulator rejects and counts them)."""
    rows = []
    m_cap = profile.kv_blocks * (1.0 - watermark)
    for w in windows:
        cap = capacity(profile, w.prompt, w.output)
        rate = (len(w) - 1) / w.arrival[-1]
        too_big = int(((w.prompt + w.output + 1) / profile.block_size + 1 > m_cap).sum())
        for load in loads:
            scaled = scale_to_rate(w.arrival, load * cap)
            rows.append(dict(data=w.trace, window=w.index, first_row=w.first, n=len(w), load=float(load),
                             trace_rate=rate, trace_cv=interarrival_cv(w.arrival), capacity=cap,
                             time_scale=float(scaled[-1] / w.arrival[-1]), scaled_cv=interarrival_cv(scaled),
                             prompt_mean=float(w.prompt.mean()), output_mean=float(w.output.mean()),
                             too_big_for_kv=too_big, hardware=profile.name))
    return pd.DataFrame(rows)
