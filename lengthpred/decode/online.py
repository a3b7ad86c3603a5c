"""Online adaptation of the decode-time readout (issue 27, item 3): RLS from completed requests.

A readout fitted on one domain's train answers (every checkpoint row, [state, log1p(t)] → remaining, ridge on
log1p, alpha chosen on that domain's val answers) serves another domain's stream; each completion reveals the
remaining length at every checkpoint it passed, and RLS takes one step per such row. The curve: the target's
held-out test answers scored after every `record_every` completions (mean over the curve's t of Spearman of
remaining length among requests running at t, and MAE over those rows), against the same readout frozen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.decode.readout import design, fit_selected, mean_spearman_at
from lengthpred.decode.store import DecodeSet
from lengthpred.errors import DataError
from lengthpred.names import rls_name
from lengthpred.online.rls import RLSRegressor


def _rows(ds: DecodeSet, ids: Sequence[str]) -> np.ndarray:
    return ds.rows_of(ids)


def score_rows(ds: DecodeSet, rows: np.ndarray, pred: np.ndarray, at: Sequence[int]) -> dict[str, float]:
    """Mean-over-t Spearman and MAE at the curve's t among the running test rows."""
    t, y = ds.t[rows], ds.remaining[rows]
    on = np.isin(t, list(at))
    return {"spearman": mean_spearman_at(y, pred, t, at), "mae": float(np.abs(pred[on] - y[on]).mean())}


def adaptation(ds: DecodeSet, source: Mapping[str, Sequence[str]], stream: Sequence[str], test: Sequence[str], *,
               alphas: Sequence[float], forgetting: Sequence[float], at: Sequence[int], record_every: int,
               seed: int = 0) -> pd.DataFrame:
    """One pair's curve: rows (head, n_seen, spearman, mae); heads `frozen` and `rls@λ` per λ in `forgetting`."""
    tr, va, te = _rows(ds, source["train"]), _rows(ds, source["val"]), _rows(ds, test)
    if not len(tr) or not len(va) or not len(te):
        raise DataError("decode online: a pair without source train/val or target test decode states")
    y = ds.remaining
    Xtr, Xva, Xte = (design(ds, r, None, 1.0) for r in (tr, va, te))
    lin, _, _ = fit_selected("linear", {}, {"alpha": list(alphas)}, (Xtr, y[tr]),
                             lambda h: mean_spearman_at(y[va], h.predict(Xva), ds.t[va], at))
    heads = {"frozen": RLSRegressor(alpha=lin.alpha_).fit(Xtr, y[tr])}
    heads |= {rls_name(lam): RLSRegressor(alpha=lin.alpha_, forgetting=lam).fit(Xtr, y[tr]) for lam in forgetting}
    order = [pid for pid in np.random.default_rng(seed).permutation(sorted(stream)) if len(_rows(ds, [pid]))]
    out = []
    for n in range(len(order) + 1):
        if n % record_every == 0 or n == len(order):
            out += [{"head": k, "n_seen": n, **score_rows(ds, te, h.predict(Xte), at)} for k, h in heads.items()]
        if n < len(order):
            r = _rows(ds, [order[n]])
            X = design(ds, r, None, 1.0)
            for k, h in heads.items():
                if k != "frozen":
                    h.partial_fit(X, y[r])
    return pd.DataFrame(out)


def pair_ids(splits: Mapping[str, Any], pair: Mapping[str, Any], stream_parts: Sequence[str]) -> tuple:
    """(source {train, val}, target stream ids, target test ids) of a cross pair of splits.json: the pair's own
    source train/val and target test lists (a `mix` source pools the other domains), the stream from the
    target's in-domain parts."""
    t = splits["indomain"][pair["target"]]
    stream = [i for p in stream_parts for i in t.get(p, [])]
    return {"train": pair["train"], "val": pair["val"]}, stream, pair["test"]


def plot_adaptation(df: pd.DataFrame, path: Any, title: str = "") -> Any:
    """Mean over pairs of the target-test score vs completions seen, per head (two panels), at the points every
    pair has (a stream's own last point, or the later points of longer streams, would move the mean by which
    pairs are in it, even for the frozen readout)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lengthpred.figures import legend_outside

    if "pair" in df:  # only the points every pair has: each mean then averages the same pairs
        n_pairs = df.groupby("n_seen")["pair"].nunique()
        df = df[df["n_seen"].isin(n_pairs[n_pairs == df["pair"].nunique()].index)]
    g = df.groupby(["head", "n_seen"])[["spearman", "mae"]].mean().reset_index()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
    for ax, m, lab in zip(axes, ("spearman", "mae"), ("mean-over-t Spearman (target test)", "MAE (tokens)"),
                          strict=True):
        for head, h in g.groupby("head", sort=False):
            ax.plot(h["n_seen"], h[m], marker="o", ms=2, label=head, **({"color": "black", "ls": "--"}
                                                                          if head == "frozen" else {}))
        ax.set_xlabel("completions of the target stream seen")
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    legend_outside(fig, axes)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
