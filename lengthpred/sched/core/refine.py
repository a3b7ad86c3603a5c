"""Refined remaining-length predictions for the simulator (issue 27 item 4): a prediction per request at every
checkpoint t = 0, k, 2k, … of its generated tokens, as a decode-time head refreshing its estimate would give.

`RefinedPredictor` holds `remaining[i, j]`, request i's predicted remaining length at checkpoint j·k. Between
checkpoints the prediction made at the last one stands and counts down one per token generated (floored at 1),
so with the true remaining lengths (`oracle_source`) the key is exactly the oracle SRPT's, L − generated.
Sources:

- `oracle_source`: the true remaining length (the bound);
- `prompt_source`: the prompt-only prediction p minus tokens generated (the baseline); once a request outlives
  p it expects as many tokens again as it made beyond p (the simulator's `ArrayPredictor` rule);
- `calibrated_source`: true remaining length × exp(σ(t)·z), z an AR(1) series over a request's checkpoints
  (correlation `rho` between consecutive ones), σ(t) fitted so that the Spearman of predicted against true
  remaining length among requests still running at t matches a measured curve (`fit_sigma`;
  `read_curve_spearman` reads docs/results/refinement/demo_decode_curve.md). A model of a decode head, not the head itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from scipy import stats

from lengthpred.errors import ConfigError, DataError


class RefinedPredictor:
    """Per request, the predicted remaining length at each checkpoint j·`every` (`remaining`: [n, C])."""

    def __init__(self, remaining: np.ndarray, every: int, name: str = "refined") -> None:
        if every < 1:
            raise ConfigError(f"checkpoint interval every={every} must be >= 1")
        r = np.asarray(remaining, dtype=float)
        if r.ndim != 2 or r.shape[1] < 1 or not np.all(np.isfinite(r)):
            raise DataError(f"predictor {name}: remaining must be a finite [requests, checkpoints] array")
        self.table, self.every, self.name = np.maximum(r, 1.0), int(every), name
        self.values = self.table[:, 0].copy()  # the prediction at arrival (t = 0): the total length
        self._last = self.table.shape[1] - 1

    def predict(self, i: int, now: float) -> float:
        return float(self.values[i])

    def on_complete(self, i: int, length: int, now: float) -> None:
        pass

    def _checkpoint(self, generated: np.ndarray) -> np.ndarray:
        return np.minimum(np.floor(generated / self.every), self._last).astype(np.int64)

    def remaining(self, i: int, generated: float) -> float:
        """The latest checkpoint's prediction, less the tokens generated since (at least 1)."""
        j = min(math.floor(generated / self.every), self._last)
        return max(float(self.table[i, j]) - (generated - j * self.every), 1.0)

    def remaining_many(self, idx: np.ndarray, generated: np.ndarray) -> np.ndarray:
        j = self._checkpoint(generated)
        return np.maximum(self.table[idx, j] - (generated - j * self.every), 1.0)

    def total(self, i: int, generated: float) -> float:
        """The predicted total length at the latest checkpoint (refreshed SJF's key)."""
        j = min(math.floor(generated / self.every), self._last)
        return float(j * self.every + self.table[i, j])

    def total_many(self, idx: np.ndarray, generated: np.ndarray) -> np.ndarray:
        j = self._checkpoint(generated)
        return j * self.every + self.table[idx, j]


def _grid(lengths: np.ndarray, every: int) -> np.ndarray:
    """[C] checkpoints 0, k, … up to the longest request's last token."""
    if every < 1:
        raise ConfigError(f"checkpoint interval every={every} must be >= 1")
    return np.arange(0, int(np.max(lengths)), every, dtype=float) if len(lengths) else np.zeros(1)


def oracle_source(lengths: np.ndarray, every: int) -> RefinedPredictor:
    L = np.asarray(lengths, dtype=float)
    t = _grid(L, every)
    return RefinedPredictor(np.maximum(L[:, None] - t[None, :], 1.0), every, name="oracle")


def remaining_from_end(end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Remaining length at t of a request predicted to end at `end`: counts down to it, and once the request
    outlives it, expects as many tokens again as it made beyond it (the simulator's `ArrayPredictor` rule)."""
    return np.where(t < end, end - t, t - end + 1.0)


def prompt_source(pred: np.ndarray, lengths: np.ndarray, every: int) -> RefinedPredictor:
    p = np.asarray(pred, dtype=float)[:, None]
    t = _grid(np.asarray(lengths, dtype=float), every)[None, :]
    return RefinedPredictor(remaining_from_end(p, t), every, name="prompt")


def _ar1(n: int, c: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """[n, c] standard normal series with lag-1 correlation rho along axis 1."""
    e = rng.standard_normal((n, c))
    z = np.empty_like(e)
    z[:, 0] = e[:, 0]
    s = math.sqrt(max(0.0, 1.0 - rho * rho))
    for j in range(1, c):
        z[:, j] = rho * z[:, j - 1] + s * e[:, j]
    return z


def calibrated_source(lengths: np.ndarray, sigma: Mapping[float, float], every: int, rng: np.random.Generator,
                      rho: float = 0.9, name: str = "calibrated") -> RefinedPredictor:
    """True remaining × exp(σ(t)·z); σ between the measured points interpolated in t, held beyond the last."""
    if not 0 <= rho <= 1:
        raise ConfigError(f"rho={rho} must lie in [0, 1]")
    L = np.asarray(lengths, dtype=float)
    t = _grid(L, every)
    ts = sorted(sigma)
    sig = np.interp(t, ts, [sigma[x] for x in ts])  # [C]
    z = _ar1(len(L), len(t), rho, rng)
    rem = np.maximum(L[:, None] - t[None, :], 1.0)
    return RefinedPredictor(rem * np.exp(sig[None, :] * z), every, name=name)


def fit_sigma(lengths: np.ndarray, target: Mapping[float, float], *, seed: int = 0, n_max: int = 20000,
              hi: float = 20.0) -> dict[float, float]:
    """σ(t) per measured point t such that Spearman(remaining·exp(σz), remaining) over the requests of
    `lengths` still running at t (L > t) equals target[t]; σ = `hi` where the target is <= 0 (no signal)."""
    L = np.asarray(lengths, dtype=float)
    rng = np.random.default_rng([seed, 27])  # its own stream: not the one that drew the lengths
    out = {}
    for t, rho_t in sorted(target.items()):
        rem = L[L > t] - t
        if len(rem) > n_max:
            rem = rng.choice(rem, n_max, replace=False)
        if len(rem) < 3:
            raise DataError(f"fit_sigma: {len(rem)} requests still running at t={t}; need >= 3")
        z = rng.standard_normal(len(rem))
        logr = np.log(rem)
        if rho_t <= 0:
            out[float(t)] = hi
            continue

        def sp(s: float, logr=logr, z=z) -> float:
            return float(stats.spearmanr(logr + s * z, logr)[0])

        lo_s, hi_s = 0.0, hi
        if sp(hi_s) > rho_t:
            out[float(t)] = hi
            continue
        for _ in range(40):  # Spearman falls with σ: bisection
            mid = (lo_s + hi_s) / 2
            lo_s, hi_s = (mid, hi_s) if sp(mid) > rho_t else (lo_s, mid)
        out[float(t)] = (lo_s + hi_s) / 2
    return out


def read_curve_spearman(path: str | Path, head: str) -> dict[float, float]:
    """{t: Spearman} of `head` from a decode curve's markdown table (docs/results/refinement/demo_decode_curve.md, curve.md)."""
    text = Path(path).read_text()
    header = next((ln for ln in text.splitlines() if ln.startswith("| predictor")), None)
    row = next((ln for ln in text.splitlines() if ln.startswith(f"| {head}: spearman |")), None)
    if header is None or row is None:
        raise DataError(f"{path}: no '{head}: spearman' row in a '| predictor | t=…' table")
    ts = [float(c.strip()[2:]) for c in header.strip("|").split("|")[1:]]
    vals = [float(re.split(r"\s", c.strip())[0]) for c in row.strip("|").split("|")[1:]]
    return dict(zip(ts, vals, strict=True))
