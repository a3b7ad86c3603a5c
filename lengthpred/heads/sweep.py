"""Which layer and pooling: fit heads over a grid of stored features and score each with a bootstrap CI.

The in-domain pooled splits of the train stage (fit on train, select on val, score on test), for every
(head, layer, pooling) of the grid; heads that learn their pooling (`estp_learned`) take one row per
layer. Features are loaded once; each grid cell is a fresh fit, so rows are directly comparable.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import ConfigError
from lengthpred.heads.assemble import indomain_ids, labeled_set
from lengthpred.heads.base import HEADS
from lengthpred.heads.run import check_features_config, load_targets_for
from lengthpred.heads.training import run_training
from lengthpred.names import FeatureKey
from lengthpred.paths import REPO_ROOT

log = logging.getLogger(__name__)
LEARNED = "learned"  # the pooling column of heads that pool token-level states themselves


def head_config(cfg: DictConfig, name: str) -> dict[str, Any]:
    """`conf/head/<name>.yaml`, resolved against the root config (for `${seed}`)."""
    path = REPO_ROOT / "conf" / "head" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"sweep.heads: no head config {name!r}; valid: {HEADS.names()}")
    root = OmegaConf.to_container(cfg, resolve=False)  # a plain copy: the struct flag would refuse new keys
    root["head"] = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    return OmegaConf.to_container(OmegaConf.create(root).head, resolve=True)


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


def sweep_features(cfg: DictConfig, out_dir: str | Path) -> pd.DataFrame:
    """Fit every cell of `cfg.sweep`; write `sweep.csv` and `sweep.md` into `out_dir` and return the rows."""
    from tqdm.auto import tqdm

    from lengthpred.data import load_prompts, load_splits
    from lengthpred.features import ensure_features, settings_from_cfg
    from lengthpred.metrics import evaluate

    s = cfg.sweep
    cells = grid(list(s.heads), list(s.layers), list(s.poolings))
    settings = settings_from_cfg(cfg)
    for h, layer, pooling in cells:  # every refusal before the (possibly long) feature extraction
        token = HEADS.get(h).input_kind == "tokens"
        check_features_config(settings, None if token else str(FeatureKey(layer, pooling)), layer if token else None,
                              pooling)
    prompts = load_prompts(cfg.data)
    by_id = {r["id"]: r for r in prompts}
    targets = load_targets_for(cfg, prompts)
    features = ensure_features(cfg, prompts, need=[(layer, pooling) for _, layer, pooling in cells])
    ids = indomain_ids(load_splits(cfg.data))
    rows = []
    for h, layer, pooling in tqdm(cells, desc="sweep", unit="fit"):
        token = HEADS.get(h).input_kind == "tokens"
        feature = None if token else str(FeatureKey(layer, pooling))
        sets = {part: labeled_set(ids[part], by_id, targets, features=features, feature=feature,
                                  token_layer=layer if token else None, split=part)
                for part in ("train", "val", "test")}
        hcfg = head_config(cfg, h) | {"layer": layer, "pooling": pooling, "feature": feature}
        head, m, preds = run_training(h, hcfg, sets["train"], sets["val"], sets["test"])
        est = evaluate(preds["y_true"], preds["y_pred"], ["spearman"], n_boot=int(s.n_boot), seed=int(cfg.seed))
        sp = est["spearman"]
        rows.append({
            "head": h, "layer": layer, "pooling": pooling, "spearman": sp.value, "ci_low": sp.ci_low,
            "ci_high": sp.ci_high, "val_spearman": m["val_spearman"], "mae": m["mae"], "n_test": m["n_test"],
            "selected": str(m["selected"] or ""), "alpha": head.alpha_ if token else None,  # the fusion's α (linear's alpha_ is its ridge penalty)
            "fit_seconds": m["fit_seconds"],
            **features.pooling,  # span, drop_sink, attn_norm, fuse_on: which tokens and scores the pools used
        })
        log.info("%s L%d %s: test spearman %s", h, layer, pooling, sp.value)
    df = pd.DataFrame(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "sweep.csv", index=False)
    (out / "sweep.md").write_text(render(df, cfg) + "\n")
    return df


def render(df: pd.DataFrame, cfg: DictConfig) -> str:
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
        f"**Feature sweep** ({cfg.model.name}, {cfg.data.name}; pooled in-domain test, n = "
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
