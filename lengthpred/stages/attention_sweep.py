"""Attention importance in more forms (scripts/sweep_attention.py, `sweep=attention_heads`): the readout heads
on the last token, on `attn` (every head of every `features.attn_layers` layer), on the late layers' heads only
(`sweep.late_layers`) and on the heads chosen on validation (lengthpred.heads.attention_heads), at one layer,
MLP cells over `sweep.n_seeds` seeds, with paired differences.

One extraction serves every form: a store of its own with the `attn_heads` pool at that layer. Writes
`attention_heads.csv` (every head's validation score and rank), `attention_choice.json`, `poolings.csv`,
`pooling_diffs.csv`, `attention.md` and `attention_heads.png` into the run folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.data import load_prompts, load_splits
from lengthpred.errors import ConfigError
from lengthpred.eval.plots import head_scores
from lengthpred.features.settings import HEAD_POOL, HEAD_SHARE
from lengthpred.features.store import FeatureSet, WithColumns
from lengthpred.heads import pooling_table
from lengthpred.heads.assemble import indomain_ids
from lengthpred.heads.attention_heads import HeadChoice, HeadStates, choose_heads
from lengthpred.heads.sweep import grid
from lengthpred.names import FeatureKey
from lengthpred.stages.features import ensure_store, feature_settings
from lengthpred.stages.heads import head_settings
from lengthpred.stages.readout_sweep import fit_pooling_cells, pooling_layer
from lengthpred.stages.targets import load_targets
from lengthpred.stages.tracking import tracked
from lengthpred.targets import target_frame

LATE, CHOSEN = "attn_late", "attn_valheads"


def head_states(features: FeatureSet | WithColumns, layer: int) -> HeadStates:
    """The per-head pools of `features`' rows at `layer`."""
    m = features.manifest
    return HeadStates.from_columns(features.get(str(FeatureKey(layer, HEAD_POOL))), features.get(HEAD_SHARE),
                                   m["attn_layers"], int(m["n_attention_heads"]))


def _split_states(features: FeatureSet, ids: list[str], targets: pd.DataFrame, layer: int,
                  ) -> tuple[HeadStates, np.ndarray]:
    stored = set(features.ids)
    keep = [i for i in ids if i in targets.index and i in stored]
    return head_states(features.subset(keep), layer), targets.loc[keep, "y"].to_numpy(dtype=np.float64)


def sweep_attention(cfg: Any, out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, HeadChoice]:
    """Choose the heads on validation, fit every (head, pooling) cell, write the module docstring's files."""
    s = cfg.sweep
    ref = str(s.reference_head)
    if ref not in s.heads:
        raise ConfigError(f"sweep.reference_head={ref!r} is not one of sweep.heads={list(s.heads)}")
    stored = list(s.poolings)
    if "attn" not in stored:
        raise ConfigError(f"sweep.poolings={stored}: the attention forms are compared with `attn`; include it")
    layer = pooling_layer(s)
    prompts = load_prompts(cfg.data)
    settings = feature_settings(cfg).only([(layer, p) for p in stored] + [(layer, HEAD_POOL)])
    store = ensure_store(cfg, prompts, settings, need=[(layer, p) for p in stored])
    ids = indomain_ids(load_splits(cfg.data))
    targets = target_frame(load_targets(cfg, prompts=prompts))
    train, y_train = _split_states(store, ids["train"], targets, layer)
    val, y_val = _split_states(store, ids["val"], targets, layer)
    alphas = head_settings(cfg, "linear").select["alpha"]
    choice = choose_heads(train, y_train, val, y_val, alphas, list(s.head_counts))
    every = head_states(store, layer)
    late = every.heads_of_layers(list(s.late_layers))
    attn_all = every.pooled(range(every.share.shape[1]))
    stored_attn = store.get(str(FeatureKey(layer, "attn")))
    # relative to the pool's largest entry: both sides went through the store's dtype (float16 by default)
    gap = float(np.max(np.abs(attn_all - stored_attn)) / max(float(np.max(np.abs(stored_attn))), 1e-30))
    features = WithColumns(store, {str(FeatureKey(layer, LATE)): every.pooled(late),
                                   str(FeatureKey(layer, CHOSEN)): every.pooled(choice.heads)})

    cells = grid(list(s.heads), [layer], [*stored, LATE, CHOSEN])
    inputs = {"head_settings": {h: head_settings(cfg, h) for h in s.heads}, "ids": ids,
              "by_id": {r["id"]: r for r in prompts}, "targets": targets, "features": features}
    df, diffs = fit_pooling_cells(cfg, cells, inputs, desc="attention forms")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    heads = pd.DataFrame([{"index": k, "layer": every.label(k)[0], "head": every.label(k)[1],
                           "val_spearman": choice.head_val[k], "rank": int(np.flatnonzero(choice.order == k)[0]) + 1,
                           "chosen": k in choice.heads, "late": k in late} for k in range(len(choice.head_val))])
    heads.to_csv(out / "attention_heads.csv", index=False)
    (out / "attention_choice.json").write_text(json.dumps({
        "layer": layer, "k": choice.k, "k_val": {str(k): v for k, v in choice.k_val.items()},
        "heads": [list(every.label(k)) for k in choice.heads], "late_layers": [int(v) for v in s.late_layers],
        "attn_rebuilt_max_rel_diff": gap, "model": str(cfg.model.name), "data": str(cfg.data.name)}, indent=1))
    df.to_csv(out / "poolings.csv", index=False)
    diffs.to_csv(out / "pooling_diffs.csv", index=False)
    title = f"{cfg.model.name}, {cfg.data.name}: each attention head alone, layer-{layer} readout, val Spearman"
    head_scores(heads, out / "attention_heads.png", title=title)
    (out / "attention.md").write_text(render(df, diffs, choice, every, late, cfg, layer, gap) + "\n")
    return df, diffs, choice


def render(df: pd.DataFrame, diffs: pd.DataFrame, choice: HeadChoice, every: HeadStates, late: list[int],
           cfg: Any, layer: int, gap: float) -> str:
    """The choice (which heads, each k's validation score), then the pooling × head tables."""
    s = cfg.sweep
    top = ", ".join(f"L{a}h{b}" for a, b in (every.label(k) for k in choice.order[:8]))
    ks = " | ".join(f"{k}: {v:.3f}" for k, v in choice.k_val.items())
    lines = [
        f"**Attention importance in more forms** ({cfg.model.name}, {cfg.data.name}; readout layer {layer}; "
        f"{len(every.layers)} attention layers × {every.n_heads} heads)",
        "",
        f"- `attn`: every head of every attention layer ({every.share.shape[1]} heads; rebuilt from the per-head "
        f"pools to within {gap:.1e} of the stored pool's largest entry).",
        f"- `{LATE}`: the {len(late)} heads of layers {list(s.late_layers)}.",
        f"- `{CHOSEN}`: the top {choice.k} heads, ranked each alone by the linear readout's validation Spearman "
        f"(train fit, α chosen on val), k chosen on validation among: {ks}. Best single heads: {top}.",
        "",
        pooling_table.render(df, diffs, model=str(cfg.model.name), data=str(cfg.data.name), layer=layer,
                             reference_head=str(s.reference_head), poolings=list(dict.fromkeys(df["pooling"]))),
        "",
        "![each head alone](attention_heads.png)",
    ]
    return "\n".join(lines)


def run_sweep_attention(cfg: Any, out: str | Path) -> Path:
    """The attention-forms sweep (scripts/sweep_attention.py): `sweep_attention` into `out`, logged and printed."""
    with tracked(cfg, "sweep_attention") as tracker:
        df, diffs, choice = sweep_attention(cfg, out)
        tracker.log_frame("poolings", df)
    print((Path(out) / "attention.md").read_text())
    return Path(out)
