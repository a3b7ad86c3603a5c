"""The castillo_within_bin stage (scripts/castillo_within_bin.py): for each head in
`crossmodel.within_bin_heads`, the MAE of its median read uniformly inside the bin against read on the bin's
training lengths, beside the mean's, per fit target on its validation and test prompts
(lengthpred.crossmodel.within_bin). The same union, split, features and head settings as the castillo stage."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from lengthpred.crossmodel.table import short_model
from lengthpred.crossmodel.within_bin import compare_within_bin
from lengthpred.errors import ConfigError
from lengthpred.stages.castillo import feature_columns, head_specs, load_union, prompt_inputs, split_prompts


def within_bin_markdown(rows: pd.DataFrame) -> str:
    """Per head and part: the mean over fit targets, and how many targets the training shape scores lower."""
    lines = ["| head | part | fits | binning | MAE of the mean (tokens, mean over fits) | MAE of the median read "
             "uniformly in its bin (tokens, mean over fits) | MAE of the median read on the bin's training lengths "
             "(tokens, mean over fits) | fits where the training shape is lower | prompts whose uniform median is in "
             "the last bin (pooled over fits) | their share of what the uniform reading adds (pooled over fits) |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for (head, part), g in rows.groupby(["head", "part"], sort=False):
        for binning, b in [("all", g), *g.groupby("binning")]:
            lower = int((b.mae_median_training < b.mae_median_uniform).sum())
            added = b.excess_all.sum()
            share = f"{b.excess_last_bin.sum() / added:.0%}" if added > 0 else "–"
            lines.append(f"| {head} | {part} | {len(b)} | {binning} | {b.mae_mean.mean():.1f} | "
                         f"{b.mae_median_uniform.mean():.1f} | {b.mae_median_training.mean():.1f} | {lower} of {len(b)} | "
                         f"{int(b.n_last_bin.sum())} of {int(b.n.sum())} | {share} |")
    return "\n".join(lines) + "\n"


def per_fit_markdown(rows: pd.DataFrame) -> str:
    wide = rows.pivot_table(index=["head", "fit", "binning"], columns="part",
                            values=["mae_mean", "mae_median_uniform", "mae_median_training"], sort=False)
    lines = ["| head | fit | binning | validation MAE (tokens): mean / median uniform / median training | "
             "test MAE (tokens): the same |",
             "|---|---|---|---|---|"]
    for (head, fit, binning), r in wide.iterrows():
        cells = [" / ".join(f"{r[(c, part)]:.1f}" for c in ("mae_mean", "mae_median_uniform", "mae_median_training"))
                 for part in ("val", "test")]
        lines.append(f"| {head} | {short_model(fit)} | {binning} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def run_castillo_within_bin(cfg: DictConfig, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [str(h) for h in (cfg.crossmodel.get("within_bin_heads") or [])]
    if not wanted:
        raise ConfigError("crossmodel.within_bin_heads is empty: name the binned heads to compare, e.g. [probe]")
    union = load_union(cfg.data)
    specs = [s for s in head_specs(cfg, union.table.models) if s.name in wanted and not s.within]
    missing = sorted(set(wanted) - {s.name for s in specs})
    if missing:
        raise ConfigError(f"crossmodel.within_bin_heads: {missing} are not among crossmodel.heads")
    chosen, split = split_prompts(cfg, union)
    inputs, _ = prompt_inputs(cfg, union, chosen, feature_columns(cfg, specs))
    rows = pd.concat([compare_within_bin(s, inputs, union.table, split) for s in specs], ignore_index=True)
    rows.to_csv(out / "within_bin.csv", index=False)
    text = within_bin_markdown(rows) + "\n" + per_fit_markdown(rows)
    (out / "within_bin.md").write_text(text, encoding="utf-8")
    print(text)
    return out
