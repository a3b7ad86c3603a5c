"""Replay a target split as a request stream: predict at arrival, learn at completion, record curves.

Every head sees the same events in the same order. Request i is predicted when it arrives (its prefill
finished) and its served length is revealed only at its completion time from the completion model, so
later arrivals are predicted before earlier lengths are known, as in serving. Each at-arrival prediction
records how many labels had been revealed by then (`labels_seen`) and how many requests were still in
flight (`in_flight`): the in-stream metric scores that prediction against the length revealed later.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from lengthpred.errors import ConfigError, DataError
from lengthpred.metrics import spearman_or_nan

FIT_ON = ("source", "source+stream", "stream")
LABELS = ("revealed", "mean")


@dataclass
class HeadSpec:
    """An estimator, the data its offline fit sees, whether completions update it and with which label.

    `label="revealed"`: the one sampled length the completion produced (what a server sees);
    `label="mean"`: the mean of the prompt's k samples, an oracle no server has (the mean-label row).
    """

    estimator: Any
    fit_on: str = "source"
    update: bool = True
    label: str = "revealed"

    def __post_init__(self) -> None:
        if self.fit_on not in FIT_ON:
            raise ConfigError(f"fit_on={self.fit_on!r}; valid: {FIT_ON}")
        if self.label not in LABELS:
            raise ConfigError(f"label={self.label!r}; valid: {LABELS}")


@dataclass
class StreamData:
    """Source rows (offline fit), the target stream in arrival order, and a held-out target test set.

    `y_stream` is what each completion reveals (one sampled length); `y_stream_mean` the mean of the
    prompt's samples (default: `y_stream`), read only by `label="mean"` heads; `is_val` marks the stream
    requests whose in-stream scores choose λ (scored apart as `val_*`; the `stream_*` scores exclude them).
    """

    X_source: np.ndarray
    y_source: np.ndarray
    X_stream: np.ndarray
    y_stream: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    ids_stream: list[str] = field(default_factory=list)
    ids_test: list[str] = field(default_factory=list)
    y_stream_mean: np.ndarray | None = None
    is_val: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("source", "stream", "test"):
            X, y = getattr(self, f"X_{name}"), getattr(self, f"y_{name}")
            if X.ndim != 2 or len(X) != len(y) or len(X) == 0:
                raise DataError(f"{name}: need X [n, d] and y [n] with n >= 1, got {X.shape} and {y.shape}")
        if not self.ids_stream:
            self.ids_stream = [str(i) for i in range(len(self.y_stream))]
        if not self.ids_test:
            self.ids_test = [str(i) for i in range(len(self.y_test))]
        n = len(self.y_stream)
        self.y_stream_mean = self.y_stream if self.y_stream_mean is None else np.asarray(self.y_stream_mean)
        self.is_val = np.zeros(n, dtype=bool) if self.is_val is None else np.asarray(self.is_val, dtype=bool)
        if self.y_stream_mean.shape != (n,) or self.is_val.shape != (n,):
            raise DataError(f"y_stream_mean and is_val need one entry per stream request ({n})")


@dataclass
class StreamResult:
    curves: pd.DataFrame  # head, n_updates, t_s, test_spearman, test_mae (held-out test vs labels learned)
    # head, id, is_val, arrival_s, done_s, labels_seen, in_flight, y_true (revealed), y_mean, y_pred (at arrival)
    stream_predictions: pd.DataFrame
    test_predictions: pd.DataFrame  # head, id, y_true, y_pred (final state)
    summary: pd.DataFrame  # one row per head: final and in-stream metrics, labels seen, update cost
    estimators: dict[str, Any] = field(default_factory=dict)  # head -> its estimator after the stream


def _mae(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean(np.abs(y - p))) if len(y) else float("nan")


def run_stream(
    heads: dict[str, HeadSpec],
    data: StreamData,
    completion: Any,
    *,
    record_every: int = 10,
    window: int = 50,
    progress: bool = True,
) -> StreamResult:
    """Run every head over one stream; test curves recorded at 0 updates and after every `record_every`.

    `window` is kept for call compatibility; the in-stream curves vs labels seen are computed from
    `stream_predictions` (`lengthpred.online.curves`).
    """
    if record_every < 1 or window < 3:
        raise ConfigError(f"record_every={record_every} must be >= 1 and window={window} >= 3")
    fit_data = {
        "source": (data.X_source, data.y_source),
        "stream": (data.X_stream, data.y_stream),
        "source+stream": (
            np.vstack([data.X_source, data.X_stream]),
            np.concatenate([data.y_source, data.y_stream]),
        ),
    }
    for spec in heads.values():
        spec.estimator.fit(*fit_data[spec.fit_on])

    arrival, done = completion.schedule(data.y_stream)
    n = len(data.y_stream)
    # events by time; at equal times an arrival precedes a completion (a request is predicted first)
    # a request whose completion time is not finite (the scheduler never finished it) is never revealed
    events = sorted(
        [(a, 0, i) for i, a in enumerate(arrival)] + [(c, 1, i) for i, c in enumerate(done) if np.isfinite(c)]
    )
    n_revealable = sum(1 for c in done if np.isfinite(c))
    preds = {h: np.full(n, np.nan) for h in heads}
    labels_seen, in_flight = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    labels = {"revealed": data.y_stream, "mean": data.y_stream_mean}
    revealed: list[int] = []
    n_arrived = 0
    update_s = dict.fromkeys(heads, 0.0)
    rows: list[dict[str, Any]] = []

    def record(t: float) -> None:
        for h, spec in heads.items():
            p_test = spec.estimator.predict(data.X_test)
            rows.append(
                {
                    "head": h,
                    "n_updates": len(revealed),
                    "t_s": float(t),
                    "test_spearman": spearman_or_nan(data.y_test, p_test),
                    "test_mae": _mae(data.y_test, p_test),
                }
            )

    record(0.0)
    for t, kind, i in tqdm(events, desc="stream", disable=not progress, mininterval=2.0):
        x = data.X_stream[i : i + 1]
        if kind == 0:
            labels_seen[i], in_flight[i] = len(revealed), n_arrived - len(revealed)
            n_arrived += 1
            for h, spec in heads.items():
                preds[h][i] = spec.estimator.predict(x)[0]
            continue
        for h, spec in heads.items():
            if spec.update:
                t0 = time.perf_counter()
                spec.estimator.partial_fit(x, labels[spec.label][i : i + 1])
                update_s[h] += time.perf_counter() - t0
        revealed.append(i)
        if len(revealed) % record_every == 0 or len(revealed) == n_revealable:
            record(t)

    curves = pd.DataFrame(rows).drop_duplicates(subset=["head", "n_updates"], keep="last")
    stream_rows, test_rows, summary = [], [], []
    rep, val = ~data.is_val, data.is_val
    for h, spec in heads.items():
        p_test = spec.estimator.predict(data.X_test)
        stream_rows.append(
            pd.DataFrame(
                {
                    "head": h,
                    "id": data.ids_stream,
                    "is_val": data.is_val,
                    "arrival_s": arrival,
                    "done_s": done,
                    "labels_seen": labels_seen,
                    "in_flight": in_flight,
                    "y_true": data.y_stream,
                    "y_mean": data.y_stream_mean,
                    "y_pred": preds[h],
                }
            )
        )
        test_rows.append(
            pd.DataFrame({"head": h, "id": data.ids_test, "y_true": data.y_test, "y_pred": p_test})
        )
        first = curves[(curves["head"] == h) & (curves["n_updates"] == 0)].iloc[0]
        summary.append(
            {
                "head": h,
                "fit_on": spec.fit_on,
                "label": spec.label,
                "stream_spearman": spearman_or_nan(data.y_stream[rep], preds[h][rep]),
                "stream_mae": _mae(data.y_stream[rep], preds[h][rep]),
                "val_spearman": spearman_or_nan(data.y_stream[val], preds[h][val]),
                "labels_seen_mean": float(labels_seen.mean()),
                "labels_seen_median": float(np.median(labels_seen)),
                "labels_seen_ge10": float(np.mean(labels_seen >= 10)),
                "in_flight_mean": float(in_flight.mean()),
                "n_revealed": int(n_revealable),
                "test_spearman_start": first.test_spearman,
                "test_spearman": spearman_or_nan(data.y_test, p_test),
                "test_mae": _mae(data.y_test, p_test),
                "update_ms": 1e3 * update_s[h] / max(n, 1) if spec.update else float("nan"),
                "rejected": int(getattr(spec.estimator, "rejected_", 0)),
            }
        )
    return StreamResult(
        curves=curves.reset_index(drop=True),
        stream_predictions=pd.concat(stream_rows, ignore_index=True),
        test_predictions=pd.concat(test_rows, ignore_index=True),
        summary=pd.DataFrame(summary),
        estimators={h: spec.estimator for h, spec in heads.items()},
    )


def gain_over_static(summary: pd.DataFrame, head: str, baseline: str = "static") -> dict[str, float]:
    """Spearman difference `head` − `baseline` (absolute: a relative gain off a near-zero base says nothing)."""
    s = summary.set_index("head")
    if head not in s.index or baseline not in s.index:
        raise ConfigError(f"gain needs heads {head!r} and {baseline!r}; have {list(s.index)}")
    return {
        f"{col}_delta": float(s.at[head, col]) - float(s.at[baseline, col])
        for col in ("stream_spearman", "test_spearman")
    }
