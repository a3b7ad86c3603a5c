"""Remaining-length readouts on decode states, chosen on validation, against the prompt-only head.

Rows are checkpoints (answer, t) of running requests (t < length); the target is remaining = length - t.
Every decode head sees [state, log1p(t)]; `with_prompt` adds the prompt-only head's log1p(L̂) and its implied
remaining log1p(max(L̂ - t, floor)). The prompt-only head is the linear readout on the t = 0 state (the
prefill's last-token feature, `hs.L{l}.last`) fitted to the total length; its train-split values fed to a decode
head are out-of-fold (K folds over train prompts) so the decode head does not learn to trust an in-sample fit.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lengthpred.decode.store import DecodeSet
from lengthpred.errors import DataError
from lengthpred.heads.base import HEADS, BaseHead
from lengthpred.metrics import spearman

log = logging.getLogger(__name__)


def implied_remaining(total: np.ndarray, t: np.ndarray, floor: float) -> np.ndarray:
    """The prompt-only baseline at t for a request still running: its predicted total minus t, never below
    `floor` (it has not ended, so at least one more token is coming)."""
    return np.maximum(np.asarray(total, dtype=np.float64) - t, floor)


def candidates(select: Mapping[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    """Every combination of the `select` grid (one empty candidate when there is none)."""
    if not select:
        return [{}]
    keys = list(select)
    return [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*(select[k] for k in keys))]


def fit_selected(name: str, params: Mapping[str, Any], select: Mapping[str, Sequence[Any]] | None,
                 train: tuple[np.ndarray, np.ndarray], score_val: Any) -> tuple[BaseHead, dict[str, Any], float]:
    """Fit each candidate on train, keep the best `score_val(head)` (higher is better; validation only)."""
    best: tuple[BaseHead, dict[str, Any], float] | None = None
    for cand in candidates(select):
        head = HEADS.get(name)(**(dict(params) | cand)).fit(*train)
        s = float(score_val(head))
        if best is None or (np.isfinite(s) and not s <= best[2]):
            best = (head, cand, s)
    assert best is not None
    return best


@dataclass
class Splits:
    """Row indices of the decode set per split part, and answer indices per part."""

    rows: dict[str, np.ndarray]
    answers: dict[str, np.ndarray]

    @classmethod
    def of(cls, ds: DecodeSet, ids: Mapping[str, Sequence[str]]) -> Splits:
        pos = {pid: k for k, pid in enumerate(ds.ids)}
        answers = {part: np.array(sorted(pos[i] for i in ids[part] if i in pos), dtype=np.int64) for part in ids}
        rows = {part: np.flatnonzero(np.isin(ds.row_prompt, a)) for part, a in answers.items()}
        for part in ("train", "val", "test"):
            if len(answers.get(part, ())) < 3:
                raise DataError(f"decode curve: the {part} split has {len(answers.get(part, ()))} answers with "
                                "decode states (need >= 3)")
        return cls(rows, answers)


def prompt_head(ds: DecodeSet, sp: Splits, params: Mapping[str, Any], select: Mapping[str, Sequence[Any]] | None,
                n_folds: int) -> tuple[np.ndarray, dict[str, Any]]:
    """L̂ per answer from the linear readout on the t = 0 state (train: out-of-fold; val/test: the head fitted
    on all of train, its alpha chosen on val Spearman of total length)."""
    row0 = np.full(len(ds.ids), -1)
    first = np.flatnonzero(ds.t == 0)
    row0[ds.row_prompt[first]] = first
    X0, y = ds.X[row0], ds.length.astype(np.float64)
    tr, va = sp.answers["train"], sp.answers["val"]
    head, cand, s = fit_selected("linear", params, select, (X0[tr], y[tr]),
                                 lambda h: spearman(y[va], h.predict(X0[va])))
    out = head.predict(X0)
    folds = np.array_split(np.random.default_rng(0).permutation(tr), n_folds)
    for f in folds:
        rest = np.setdiff1d(tr, f)
        out[f] = HEADS.get("linear")(**(dict(params) | cand)).fit(X0[rest], y[rest]).predict(X0[f])
    return out, {"chosen": cand, "val_spearman": s}


def design(ds: DecodeSet, rows: np.ndarray, total_hat: np.ndarray | None, floor: float) -> np.ndarray:
    """[state, log1p(t)] (+ [log1p(L̂), log1p(implied remaining)] when `total_hat` is given) for `rows`."""
    t = ds.t[rows].astype(np.float64)
    cols = [ds.X[rows], np.log1p(t)[:, None]]
    if total_hat is not None:
        th = total_hat[ds.row_prompt[rows]]
        cols += [np.log1p(np.maximum(th, 0))[:, None], np.log1p(implied_remaining(th, t, floor))[:, None]]
    return np.concatenate(cols, axis=1)


def mean_spearman_at(y: np.ndarray, p: np.ndarray, t: np.ndarray, at: Sequence[int]) -> float:
    """Mean over the curve's points of Spearman(remaining, prediction) among rows at that t (the selection score)."""
    vals = [spearman(y[t == k], p[t == k]) for k in at if (t == k).sum() >= 3]
    vals = [float(v) for v in vals if isinstance(v, float) and np.isfinite(v)]
    return float(np.mean(vals)) if vals else float("nan")


@dataclass
class Curve:
    """Test-split predictions of every predictor at every checkpoint row, and what was chosen on val."""

    rows: np.ndarray  # test rows of the decode set
    y: np.ndarray  # remaining length at those rows
    t: np.ndarray
    predictions: dict[str, np.ndarray] = field(default_factory=dict)
    chosen: dict[str, Any] = field(default_factory=dict)


def fit_curve(ds: DecodeSet, ids: Mapping[str, Sequence[str]], heads: Mapping[str, Mapping[str, Any]],
              at: Sequence[int], *, floor: float = 1.0, n_folds: int = 5,
              prompt_params: Mapping[str, Any] | None = None,
              prompt_select: Mapping[str, Sequence[Any]] | None = None) -> Curve:
    """Fit the prompt-only head and every decode head (`heads`: label → {name, params, select, with_prompt})
    on train rows, choose on val, predict the test rows."""
    sp = Splits.of(ds, ids)
    total_hat, info = prompt_head(ds, sp, prompt_params or {}, prompt_select, n_folds)
    y = ds.remaining
    test = sp.rows["test"]
    curve = Curve(test, y[test], ds.t[test], chosen={"prompt-only": info})
    curve.predictions["prompt-only"] = implied_remaining(total_hat[ds.row_prompt[test]], ds.t[test], floor)
    tr, va = sp.rows["train"], sp.rows["val"]
    for label, spec in heads.items():
        th = total_hat if spec.get("with_prompt") else None
        Xtr, Xva, Xte = (design(ds, r, th, floor) for r in (tr, va, test))
        head, cand, s = fit_selected(spec["name"], spec.get("params") or {}, spec.get("select"), (Xtr, y[tr]),
                                     lambda h, X=Xva: mean_spearman_at(y[va], h.predict(X), ds.t[va], at))
        curve.predictions[label] = np.maximum(head.predict(Xte), 0.0)
        curve.chosen[label] = {"chosen": cand, "val_mean_spearman": s}
        log.info("decode head %s: chose %s (val mean Spearman %.3f)", label, cand, s)
    return curve
