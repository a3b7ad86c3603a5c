"""A stacked ensemble of two heads' predictions: one weight, chosen on validation, applied to test.

The two heads may read different inputs (the linear readout reads a prefill state, a proxy reads the
text), so the stack combines their predictions, not their inputs. It averages them on the log scale,
log1p ŷ = c·log1p(a) + (1 − c)·log1p(b): a weighted geometric mean, so ŷ is a length on the heads' own
scale and a head stacked with itself is that head.

The weight is searched on the standardised log predictions, w·z_a + (1 − w)·z_b for w on an even grid of
[0, 1] (z with the val mean and sd of each head), keeping the best val Spearman (the first on ties); on
that scale the grid is even in the heads' relative say whatever their spreads. c = (w/σ_a) / (w/σ_a +
(1 − w)/σ_b) is the same ranking in the log-length form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lengthpred.errors import DataError
from lengthpred.metrics import METRICS, is_undefined


@dataclass(frozen=True)
class Stack:
    """A fitted stack: `weight` w (1: head a alone), `coef_a` c of the log-length form, the best
    `val_spearman`, and every candidate's (w, val Spearman) in `grid`."""

    weight: float
    coef_a: float
    val_spearman: float
    grid: tuple[tuple[float, float], ...]


def _log(pred: np.ndarray) -> np.ndarray:
    return np.log1p(np.maximum(np.asarray(pred, dtype=np.float64), 0.0))


def _sd(z: np.ndarray) -> float:
    sd = float(np.std(z))
    return sd if sd > 0 else 1.0  # a constant head ranks nothing; any scale gives the same stack


def fit_stack(y_val: np.ndarray, a_val: np.ndarray, b_val: np.ndarray, n_weights: int = 21) -> Stack:
    """The weight of head a (against head b) that ranks the val prompts best (module docstring)."""
    y, la, lb = np.asarray(y_val, dtype=np.float64), _log(a_val), _log(b_val)
    if not (len(y) == len(la) == len(lb)) or len(y) < 2:
        raise DataError(
            f"stacking needs the same >= 2 val prompts for both heads (got {len(y)}, {len(la)}, {len(lb)})"
        )
    if n_weights < 2:
        raise DataError(f"n_weights={n_weights}: the grid needs both ends (>= 2)")
    sa, sb = _sd(la), _sd(lb)
    za, zb = (la - la.mean()) / sa, (lb - lb.mean()) / sb
    spearman = METRICS.get("spearman")
    grid = []
    for w in np.linspace(0.0, 1.0, n_weights):
        rho = spearman(y, w * za + (1 - w) * zb)
        grid.append((round(float(w), 6), -math.inf if is_undefined(rho) else float(rho)))
    w, rho = max(grid, key=lambda wr: wr[1])  # max keeps the first of equals
    coef = (w / sa) / (w / sa + (1 - w) / sb)
    return Stack(weight=w, coef_a=float(coef), val_spearman=rho, grid=tuple(grid))


def predict_stack(stack: Stack, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lengths: expm1(c·log1p(a) + (1 − c)·log1p(b))."""
    return np.expm1(stack.coef_a * _log(a) + (1 - stack.coef_a) * _log(b))
