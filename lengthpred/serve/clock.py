"""Clocks for the replay loop: the wall clock of a real run, and a virtual one for the fake engine.

Both give seconds since an arbitrary origin (`now`), wait until a time (`sleep_until`) and let a
simulated engine spend time (`advance`): the wall clock really sleeps, the virtual one jumps.
"""

from __future__ import annotations

import time


class WallClock:
    """`time.perf_counter`; `epoch` maps a clock reading to `time.time()` (vLLM's arrival_time unit)."""

    def __init__(self) -> None:
        self._offset = time.time() - time.perf_counter()

    def now(self) -> float:
        return time.perf_counter()

    def epoch(self, t: float) -> float:
        return t + self._offset

    def sleep_until(self, t: float) -> None:
        dt = t - time.perf_counter()
        if dt > 0:
            time.sleep(dt)

    def advance(self, dt: float) -> None:
        if dt > 0:
            time.sleep(dt)


class VirtualClock:
    """Time that moves only when told: a run on the fake engine has exact, machine-independent timings."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def epoch(self, t: float) -> float:
        return t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, float(t))

    def advance(self, dt: float) -> None:
        self.t += max(0.0, float(dt))
