"""Numbers as the result tables show them, and as prose shows them: every statistic carries its unit label.

A table cell reads `0.754 [0.701, 0.803]` (a value and its 95% interval), `0.758 ± 0.003 (3)` (a mean and sd
over 3 seeds), `+32% [+13, +47]` (a gain in percent with its interval), `undefined` or a plain number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_NUM = r"[+\-−]?\d[\d,]*(?:\.\d+)?"
_CELL = re.compile(rf"^\s*({_NUM})(%?)\s*(?:\[\s*({_NUM})\s*,\s*({_NUM})\s*\])?")
_SD = re.compile(rf"^\s*({_NUM})\s*±\s*({_NUM})(?:\s*\((\d+)\))?")


def _f(s: str) -> float:
    return float(s.replace("−", "-").replace(",", ""))


@dataclass(frozen=True)
class Stat:
    """A value, its interval (NaN where none) and decimals as shown."""

    value: float
    lo: float = math.nan
    hi: float = math.nan
    decimals: int = 3
    percent: bool = False

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def excludes_zero(self) -> bool:
        return self.has_interval and (self.lo > 0 or self.hi < 0)

    def text(self, signed: bool = False) -> str:
        sign = "+" if signed else ""
        if self.percent:
            core = f"{self.value:{sign}.{self.decimals}f}%"
            ci = f" [{self.lo:+.{self.decimals}f}, {self.hi:+.{self.decimals}f}]" if self.has_interval else ""
        else:
            core = f"{self.value:{sign}.{self.decimals}f}"
            ci = f" [{self.lo:{sign}.{self.decimals}f}, {self.hi:{sign}.{self.decimals}f}]" if self.has_interval else ""
        return minus(core + ci)


def parse_cell(cell: str) -> Stat | None:
    """A table cell as a `Stat`, or None when it holds no number (`undefined`, `—`, text)."""
    m = _CELL.match(cell)
    if not m:
        return None
    head = m.group(1)
    dec = len(head.split(".")[1]) if "." in head else 0
    lo = _f(m.group(3)) if m.group(3) else math.nan
    hi = _f(m.group(4)) if m.group(4) else math.nan
    return Stat(_f(head), lo, hi, dec, bool(m.group(2)))


def parse_sd(cell: str) -> tuple[float, float, int] | None:
    """(mean, sd, n) of a `0.758 ± 0.003 (3)` cell, or None."""
    m = _SD.match(cell)
    if not m:
        return None
    return _f(m.group(1)), _f(m.group(2)), int(m.group(3)) if m.group(3) else 0


def minus(text: str) -> str:
    """Every hyphen-minus as U+2212, the tables' minus sign."""
    return text.replace("-", "−")


def pct(x: float, decimals: int = 0, signed: bool = True) -> str:
    """A fraction as a percent, `+32%`; minus as U+2212 like the tables."""
    if not math.isfinite(x):
        return "—"
    return minus(f"{100 * x:{'+' if signed else ''}.{decimals}f}%")


def pct_interval(x: float, lo: float, hi: float, decimals: int = 0) -> str:
    """`+32% [+13, +47]` from fractions."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return pct(x, decimals)
    return minus(f"{pct(x, decimals)} [{100 * lo:+.{decimals}f}, {100 * hi:+.{decimals}f}]")


def minutes(seconds: float) -> str:
    """`20 min 47 s` under an hour, `2 h 25 min` above; `4.8 s` under a minute."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s} s"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m} min"
