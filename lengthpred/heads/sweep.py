"""Which layer and pooling: fit heads over a grid of stored features and score each with a bootstrap CI.

The in-domain pooled splits of the train stage (fit on train, select on val, score on test), for every
(head, layer, pooling) of the grid; heads that learn their pooling (`estp_learned`) take one row per
layer. Features are loaded once; each grid cell is a fresh fit, so rows are directly comparable
(`lengthpred.stages.sweep.sweep_features` loads them for a config and writes sweep.csv / sweep.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from lengthpred.errors import ConfigError
from lengthpred.heads.assemble import labeled_set
from lengthpred.heads.base import HEADS
from lengthpred.heads.training import run_training
from lengthpred.metrics import evaluate
from lengthpred.names import FeatureKey

log = logging.getLogger(__name__)
LEARNED = "learned"  # the pooling column of heads that pool token-level states themselves


def grid(heads: Sequence[str], layers: Sequence[int], poolings: Sequence[str]) -> list[tuple[str, int, str]]:
    """(head, layer, pooling) cells; feature heads only (texts/ids heads have no layer to sweep)."""
    cells = []
    for h in heads:
        kind = HEADS.get(h).input_kind
        if kind not in ("features", "tokens"):
            raise ConfigError(f"sweep.heads: {h!r} reads {kind}, not prefill features; nothing to sweep")
        for layer in layers:
            cells += [(h, int(layer), LEARNED)] if kind == "tokens" else [(h, int(layer), p) for p in poolings]
    return cells


def fit_cells(
    cells: Sequence[tuple[str, int, str]],
    head_cfgs: Mapping[str, Mapping[str, Any]],
    ids: Mapping[str, Sequence[str]],
    by_id: Mapping[str, Mapping[str, Any]],
    targets: pd.DataFrame,
    features: Any,
    *,
    n_boot: int,
    seed: int,
    progress: bool = True,
) -> pd.DataFrame:
    """One row per cell: the head (config `head_cfgs[head]`) fitted on `ids["train"]` with that layer and
    pooling, selected on val, scored on test with a bootstrap CI."""
    rows = []
    for h, layer, pooling in tqdm(cells, desc="sweep", unit="fit", disable=not progress):
        token = HEADS.get(h).input_kind == "tokens"
        feature = None if token else str(FeatureKey(layer, pooling))
        sets = {part: labeled_set(ids[part], by_id, targets, features=features, feature=feature,
                                  token_layer=layer if token else None, split=part)
                for part in ("train", "val", "test")}
        hcfg = dict(head_cfgs[h]) | {"layer": layer, "pooling": pooling, "feature": feature}
        head, m, preds = run_training(h, hcfg, sets["train"], sets["val"], sets["test"])
        est = evaluate(preds["y_true"], preds["y_pred"], ["spearman"], n_boot=int(n_boot), seed=int(seed))
        sp = est["spearman"]
        rows.append({
            "head": h, "layer": layer, "pooling": pooling, "spearman": sp.value, "ci_low": sp.ci_low,
            "ci_high": sp.ci_high, "val_spearman": m["val_spearman"], "mae": m["mae"], "n_test": m["n_test"],
            "selected": str(m["selected"] or ""), "alpha": head.alpha_ if token else None,  # the fusion's α (linear's alpha_ is its ridge penalty)
            "fit_seconds": m["fit_seconds"],
            **features.pooling,  # span, drop_sink, attn_norm, fuse_on: which tokens and scores the pools used
        })
        log.info("%s L%d %s: test spearman %s", h, layer, pooling, sp.value)
    return pd.DataFrame(rows)


def render(df: pd.DataFrame, model: str, data: str) -> str:
    """Markdown: one row per cell, best validation Spearman first within each head."""

    def f(v: Any) -> str:
        return "undefined" if v is None or not isinstance(v, (int, float)) or pd.isna(v) else f"{v:.3f}"

    how = ""
    if len(df) and "span" in df.columns:
        r0 = df.iloc[0]
        sink = ", first token dropped" if r0["span"] == "all" and bool(r0["drop_sink"]) else ""
        how = (f"Pools range over the {'content' if r0['span'] == 'content' else 'all prompt'} tokens{sink}; "
               f"attention importance `{r0['attn_norm']}`; fused pools mix `{r0['fuse_on']}` scores.")
    lines = [
        f"**Feature sweep** ({model}, {data}; pooled in-domain test, n = "
        f"{int(df['n_test'].iloc[0]) if len(df) else 0}; 95% bootstrap CI; rows ordered by validation Spearman)",
        *([how] if how else []),
        "",
        "| Head | Layer | Pooling | Val Spearman | Test Spearman [95% CI] | MAE | learned α |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    order = df.assign(_v=df["val_spearman"].astype(float).fillna(-2)).sort_values(
        ["head", "_v", "layer", "pooling"], ascending=[True, False, True, True], kind="stable"
    )
    for r in order.to_dict("records"):
        lines.append(
            f"| {r['head']} | {r['layer']} | {r['pooling']} | {f(r['val_spearman'])} | {f(r['spearman'])} "
            f"[{f(r['ci_low'])}, {f(r['ci_high'])}] | {f(r['mae'])} | {f(r['alpha'])} |"
        )
    return "\n".join(lines)
