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

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from lengthpred.errors import ConfigError
from lengthpred.heads.assemble import labeled_set
from lengthpred.heads.base import HEADS
from lengthpred.heads.settings import HeadSettings
from lengthpred.heads.training import run_training, score
from lengthpred.metrics import evaluate
from lengthpred.names import FeatureKey
from lengthpred.seeds import spread

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


def cell_seeds(head: str, n_seeds: int) -> int:
    """Seeds a cell is fitted over: `n_seeds` for heads with a `random_state` (MLPs: init and batch order
    move their score by 0.01–0.02), one for deterministic heads (a second fit would repeat the first)."""
    return int(n_seeds) if "random_state" in HEADS.get(head)().get_params() else 1


def fit_cell(
    cell: tuple[str, int, str],
    settings: HeadSettings,
    ids: Mapping[str, Sequence[str]],
    by_id: Mapping[str, Mapping[str, Any]],
    targets: pd.DataFrame,
    features: Any,
    *,
    n_boot: int,
    seed: int,
    n_seeds: int = 1,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """One cell: the head fitted on `ids["train"]` with that layer and pooling (over `cell_seeds` seeds,
    each selected on val), scored on test with a bootstrap CI of the first seed. Returns (row, test
    predictions frame with `y_pred_seed<i>` columns when seeds > 1)."""
    h, layer, pooling = cell
    token = HEADS.get(h).input_kind == "tokens"
    feature = None if token else str(FeatureKey(layer, pooling))
    sets = {part: labeled_set(ids[part], by_id, targets, features=features, feature=feature,
                              token_layer=layer if token else None, split=part)
            for part in ("train", "val", "test")}
    cell_settings = settings.replace(layer=layer, pooling=pooling, feature=feature)
    k = cell_seeds(h, n_seeds)
    head, m, preds = run_training(h, cell_settings, sets["train"], sets["val"], sets["test"], n_seeds=k)
    est = evaluate(preds["y_true"], preds["y_pred"], ["spearman"], n_boot=int(n_boot), seed=int(seed))
    sp = est["spearman"]
    if m["val_spearman"] is None and len(sets["val"]) and len(np.unique(sets["val"].y)) > 1:
        # one candidate: run_training scored nothing on val, and a layer choice needs it (first seed's head)
        m["val_spearman"] = score(sets["val"].y, head.predict(sets["val"].inputs.x_for(HEADS.get(h).input_kind)))[
            "spearman"]
    per_seed = m.get("seeds") or [{"spearman": m["spearman"], "val_spearman": m["val_spearman"]}]
    val_seeds = [s["val_spearman"] for s in per_seed]
    val_mean = spread(val_seeds).mean if None not in val_seeds else m["val_spearman"]  # else: first seed's
    row = {
        "head": h, "layer": layer, "pooling": pooling, "spearman": sp.value, "ci_low": sp.ci_low,
        "ci_high": sp.ci_high, "val_spearman": m["val_spearman"], "mae": m["mae"], "n_test": m["n_test"],
        "n_seeds": k,
        # mean ± sd over seeds (the first seed's value, sd NaN, for one seed): what a layer is chosen on
        "val_spearman_seed_mean": val_mean,
        "spearman_seed_mean": spread([s["spearman"] for s in per_seed]).mean,
        "spearman_seed_sd": spread([s["spearman"] for s in per_seed]).sd,
        "selected": str(m["selected"] or ""), "alpha": head.alpha_ if token else None,  # the fusion's α (linear's alpha_ is its ridge penalty)
        "fit_seconds": m.get("fit_seconds_seeds", m["fit_seconds"]),
        **features.pooling,  # span, drop_sink, attn_norm, fuse_on: which tokens and scores the pools used
    }
    log.info("%s L%d %s: test spearman %s", h, layer, pooling, sp.value)
    return row, preds


def fit_cells(
    cells: Sequence[tuple[str, int, str]],
    head_settings: Mapping[str, HeadSettings],
    ids: Mapping[str, Sequence[str]],
    by_id: Mapping[str, Mapping[str, Any]],
    targets: pd.DataFrame,
    features: Any,
    *,
    n_boot: int,
    seed: int,
    n_seeds: int = 1,
    progress: bool = True,
) -> pd.DataFrame:
    """One row per cell (`fit_cell`; head settings `head_settings[head]`), each a fresh fit on the same splits."""
    rows = [fit_cell(c, head_settings[c[0]], ids, by_id, targets, features, n_boot=n_boot, seed=seed,
                     n_seeds=n_seeds)[0]
            for c in tqdm(cells, desc="sweep", unit="fit", disable=not progress)]
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
    seeded = "n_seeds" in df.columns and bool((df["n_seeds"] > 1).any())
    lines = [
        f"**Feature sweep** ({model}, {data}; pooled in-domain test, n = "
        f"{int(df['n_test'].iloc[0]) if len(df) else 0}; 95% bootstrap CI; rows ordered by validation Spearman"
        + ("; val and CI of the first seed" if seeded else "") + ")",
        *([how] if how else []),
        "",
        "| Head | Layer | Pooling | Val Spearman | Test Spearman [95% CI] | MAE | learned α |"
        + (" Test, mean ± sd over seeds |" if seeded else ""),
        "|---|---:|---|---:|---:|---:|---:|" + ("---:|" if seeded else ""),
    ]
    order = df.assign(_v=df["val_spearman"].astype(float).fillna(-2)).sort_values(
        ["head", "_v", "layer", "pooling"], ascending=[True, False, True, True], kind="stable"
    )
    for r in order.to_dict("records"):
        lines.append(
            f"| {r['head']} | {r['layer']} | {r['pooling']} | {f(r['val_spearman'])} | {f(r['spearman'])} "
            f"[{f(r['ci_low'])}, {f(r['ci_high'])}] | {f(r['mae'])} | {f(r['alpha'])} |"
            + (f" {f(r['spearman_seed_mean'])} ± {f(r['spearman_seed_sd'])} ({r['n_seeds']}) |" if seeded else "")
        )
    return "\n".join(lines)
