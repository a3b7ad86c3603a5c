"""Choosing the forgetting factor λ per pair on a validation stream, never on the target test set.

The validation stream is the target's in-domain `val` part, replayed *inside* the stream (its requests
arrive interleaved with the `train` part, in the same seeded order). Each of its requests is predicted at
arrival, before its length is known, and scored against the one length its completion later reveals:
a prequential score that uses only what a server would have seen. We chose this over a held-out prefix
because λ matters most late in the stream, when forgetting has had time to act, and a prefix would score
every λ before that; and over a separate validation run because the val part is what the in-domain
heads already reserve for selection. The target test set (the pair's `test` ids) is disjoint from both
parts and is never read here. So that the reported in-stream metric is not the one λ was chosen on,
`stream_*` scores and the labels-seen curves exclude the validation requests.

The chosen head is copied under the name `rls@val` (its λ in the summary's `forgetting` column).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError
from lengthpred.names import SELECTED_RLS, forgetting_of
from lengthpred.online.stream import StreamResult

log = logging.getLogger(__name__)

SELECTED = SELECTED_RLS


def choose_forgetting(summary: pd.DataFrame, candidates: Sequence[str], metric: str = "val_spearman") -> str:
    """The candidate with the highest validation score; ties and undefined scores go to the larger λ."""
    if not candidates:
        raise ConfigError("λ selection needs at least one rls@<λ> head")
    s = summary.set_index("head")
    missing = [c for c in candidates if c not in s.index]
    if missing:
        raise ConfigError(f"λ selection: heads {missing} not in the stream summary")
    order = sorted(candidates, key=lambda h: -forgetting_of(h))  # larger λ first: wins ties
    scores = [float(s.at[h, metric]) for h in order]
    if all(np.isnan(scores)):
        log.warning("λ selection: %s undefined for every candidate; keeping %s", metric, order[0])
        return order[0]
    best = max(v for v in scores if not np.isnan(v))
    return next(h for h, v in zip(order, scores, strict=True) if v == best)


def with_selected(res: StreamResult, chosen: str, name: str = SELECTED) -> StreamResult:
    """`res` plus a copy of the chosen head's rows under `name` (summary gains `forgetting`)."""

    def copy(df: pd.DataFrame) -> pd.DataFrame:
        return pd.concat([df, df[df["head"] == chosen].assign(head=name)], ignore_index=True)

    summary = copy(res.summary)
    summary["forgetting"] = [forgetting_of(chosen) if h == name else np.nan for h in summary["head"]]
    if "update_ms" in summary.columns:  # a copy, not a head of its own: its cost is the chosen head's (T6)
        summary.loc[summary["head"] == name, "update_ms"] = np.nan
    return StreamResult(
        curves=copy(res.curves),
        stream_predictions=copy(res.stream_predictions),
        test_predictions=copy(res.test_predictions),
        summary=summary,
        estimators={**res.estimators, **({name: res.estimators[chosen]} if chosen in res.estimators else {})},
    )
