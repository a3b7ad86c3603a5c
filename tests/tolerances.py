"""Tolerances for float32 torch results, derived from float32 arithmetic instead of from what passes on the
machine that wrote the test (AUDIT.md, "Tests").

The CPU's kernels (AVX2, AVX-512, AMX/oneDNN), the padding side and the batch shape change the order in which
a float32 reduction adds its terms, and so its rounding error, but not the error's size: for n terms that is
about eps·√n times the terms' magnitude (the probabilistic form of Higham's γ_n bound). A compared value here
goes through a handful of chained reductions (LM head, log-sum-exp over the vocabulary, z-scores, softmax,
pooling), so a comparison allows SAFETY × eps32 × √n × the compared vector's scale (1 + its largest |entry|),
with n the longest reduction upstream of the compared values: the vocabulary for anything next-token entropy
touches. Two float32 results are each within that of the exact value, so they may differ by twice it.
"""

from __future__ import annotations

import math

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)
SAFETY = 8.0


def f32_rel(n_terms: int, *, both_float32: bool = False) -> float:
    """Error bound relative to the compared vector's scale for a value downstream of an n-term float32 reduction."""
    if n_terms < 1:
        raise ValueError(f"n_terms={n_terms}: a reduction has at least one term")
    return SAFETY * EPS32 * math.sqrt(n_terms) * (2.0 if both_float32 else 1.0)


def assert_close_f32(got, want, n_terms: int, *, both_float32: bool = False, err_msg: str = "") -> None:
    """|got − want| ≤ f32_rel(n_terms) × (1 + max|want|) along the last axis (each vector on its own scale).

    `both_float32`: `want` is itself a float32 result (another padding side, batch or code path), not a float64
    reference, so the bound doubles.
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{err_msg}: shapes {got.shape} and {want.shape} differ")
    scale = 1.0 + (np.abs(want).max(axis=-1, keepdims=True) if want.ndim else abs(want))
    bound = f32_rel(n_terms, both_float32=both_float32) * scale
    excess = np.abs(got - want) - bound
    if not np.all(excess <= 0):  # NaN fails too
        i = tuple(int(k) for k in np.unravel_index(np.argmax(np.where(np.isnan(excess), np.inf, excess)), excess.shape))
        raise AssertionError(f"{err_msg}: |got - want| = {abs(got[i] - want[i]):.3g} at {i} exceeds the float32 "
                             f"bound {np.broadcast_to(bound, got.shape)[i]:.3g} (n_terms={n_terms})")
