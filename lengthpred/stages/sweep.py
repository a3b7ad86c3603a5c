"""The sweep stage (`scripts/sweep_features.py`): fit the `cfg.sweep` grid of (head, layer, pooling) on a
config's in-domain splits (`lengthpred.heads.sweep`), write `sweep.csv` and `sweep.md`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lengthpred.data import load_prompts, load_splits
from lengthpred.heads.assemble import indomain_ids
from lengthpred.heads.base import HEADS
from lengthpred.heads.sweep import fit_cells, grid
from lengthpred.heads.sweep import render as render_rows
from lengthpred.names import FeatureKey
from lengthpred.stages.features import ensure_features, feature_settings
from lengthpred.stages.heads import check_features_config, head_settings
from lengthpred.stages.targets import load_targets
from lengthpred.stages.tracking import tracked
from lengthpred.targets import target_frame


def sweep_inputs(cfg: Any, cells: list[tuple[str, int, str]]) -> dict[str, Any]:
    """What `fit_cell` reads for these cells, loaded once: every refusal (a pooling or token layer the
    features config omits) comes before the (possibly long) feature extraction."""
    settings = feature_settings(cfg)
    for h, layer, pooling in cells:
        token = HEADS.get(h).input_kind == "tokens"
        check_features_config(settings, None if token else str(FeatureKey(layer, pooling)), layer if token else None,
                              pooling)
    prompts = load_prompts(cfg.data)
    return {
        "head_settings": {h: head_settings(cfg, h) for h in dict.fromkeys(h for h, _, _ in cells)},
        "ids": indomain_ids(load_splits(cfg.data)),
        "by_id": {r["id"]: r for r in prompts},
        "targets": target_frame(load_targets(cfg, prompts=prompts)),
        "features": ensure_features(cfg, prompts, need=[(layer, pooling) for _, layer, pooling in cells]),
    }


def sweep_features(cfg: Any, out_dir: str | Path) -> pd.DataFrame:
    """Fit every cell of `cfg.sweep` (MLP cells over `sweep.n_seeds` seeds); write `sweep.csv` and
    `sweep.md` into `out_dir` and return the rows."""
    s = cfg.sweep
    cells = grid(list(s.heads), list(s.layers), list(s.poolings))
    df = fit_cells(cells, **sweep_inputs(cfg, cells), n_boot=int(s.n_boot), seed=int(cfg.seed),
                   n_seeds=int(s.get("n_seeds") or 1))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "sweep.csv", index=False)
    (out / "sweep.md").write_text(render(df, cfg) + "\n")
    return df


def render(df: pd.DataFrame, cfg: Any) -> str:
    """The sweep's Markdown table for this config's model and data."""
    return render_rows(df, str(cfg.model.name), str(cfg.data.name))


def run_sweep_features(cfg: Any, out: str | Path) -> Path:
    """The sweep stage (scripts/sweep_features.py): `sweep_features` into `out`, logged to W&B and printed.
    Returns the folder."""
    with tracked(cfg, "sweep") as tracker:
        df = sweep_features(cfg, out)
        tracker.log_frame("sweep", df)
    print(render(df, cfg))
    return Path(out)
