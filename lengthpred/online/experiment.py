"""The `scripts/adapt.py` stage: every selected cross-domain pair as a stream, all heads, curves and gains.

Writes into `out_dir`: `curves.csv`, `summary.csv`, `gains.csv` (Spearman gain over static vs shift),
`predictions.parquet` (docs/DESIGN.md), `plots/curves_<pair>.png`, `plots/gain_vs_shift.png`,
`adapt.json` (config + headline numbers).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import DataError
from lengthpred.online.config import build_completion, build_heads, rls_name, select_alpha
from lengthpred.online.pairs import (
    as_target_frame,
    gains_table,
    pair_stream,
    prediction_rows,
    run_pair,
    select_pairs,
)
from lengthpred.online.plots import plot_curves, plot_gain_vs_shift

log = logging.getLogger(__name__)


def feature_lookup(feature_set: Any, name: str) -> Callable[[Sequence[str]], np.ndarray]:
    """ids → rows of one FeatureSet column ([n, d] float64); an unknown id is a DataError."""
    X = np.asarray(feature_set.get(name), dtype=np.float64)
    row = {str(i): k for k, i in enumerate(feature_set.ids)}

    def get(ids: Sequence[str]) -> np.ndarray:
        missing = [i for i in ids if i not in row]
        if missing:
            raise DataError(f"{len(missing)} prompt(s) have no features in column {name}, e.g. {missing[0]}")
        return X[[row[i] for i in ids]]

    return get


def _load_inputs(cfg: DictConfig) -> tuple[dict, Any, pd.DataFrame]:
    from lengthpred.data import load_prompts, load_splits
    from lengthpred.features import ensure_features
    from lengthpred.targets import load_targets

    prompts = load_prompts(cfg.data)
    splits = load_splits(cfg.data)
    targets = as_target_frame(load_targets(cfg))
    if "domain" not in targets.columns:
        dom = dict(zip(prompts["id"], prompts["domain"], strict=True))
        targets["domain"] = [dom.get(i, "") for i in targets.index]
    return splits, ensure_features(cfg, prompts), targets


def run_adaptation(cfg: DictConfig, out_dir: str | Path, **inputs: Any) -> dict[str, Any]:
    """Run the online stage; inputs (splits, feature_set, targets, tracker) default to the project's stages.

    `online.blas_threads` caps BLAS threads for the stage (threadpoolctl): threaded level-2 BLAS at
    d≈576 spins badly on a busy small machine (measured here: a 577×577 Cholesky took seconds).
    """
    n_threads = cfg.online.get("blas_threads")
    if n_threads is None:
        return _run_adaptation(cfg, out_dir, **inputs)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=int(n_threads), user_api="blas"):
        return _run_adaptation(cfg, out_dir, **inputs)


def _run_adaptation(
    cfg: DictConfig,
    out_dir: str | Path,
    *,
    splits: dict | None = None,
    feature_set: Any = None,
    targets: Any = None,
    tracker: Any = None,
) -> dict[str, Any]:
    ocfg = cfg.online
    build_heads(ocfg, 1.0)  # validate λ and baselines before any work
    build_completion(ocfg)
    if splits is None or feature_set is None or targets is None:
        splits, feature_set, targets = _load_inputs(cfg)
    targets = as_target_frame(targets)
    features = feature_lookup(feature_set, str(ocfg.feature))
    pairs = select_pairs(splits.get("cross", []), list(ocfg.pairs) if ocfg.get("pairs") else None)
    if not pairs:
        raise DataError("splits.json has no cross-domain pairs to stream")
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    completion = build_completion(ocfg)
    curves, summaries, preds = [], [], []
    to_plot = _pairs_to_plot(pairs, ocfg.get("plot_pairs"), str(ocfg.shift_key))
    for k, pair in enumerate(pairs):
        ps = pair_stream(
            pair,
            splits["indomain"],
            features,
            targets,
            stream_parts=list(ocfg.stream_parts),
            shift_key=str(ocfg.shift_key),
            seed=int(cfg.get("seed", 0)) + k,
        )
        alpha = ocfg.alpha
        if alpha is None:
            alpha = select_alpha(ps.data.X_source, ps.data.y_source, list(ocfg.alphas))
        res = run_pair(
            ps,
            lambda a=float(alpha): build_heads(ocfg, a),
            completion,
            record_every=int(ocfg.record_every),
            window=int(ocfg.window),
            progress=False,
        )
        res.summary.insert(2, "alpha", float(alpha))
        curves.append(res.curves)
        summaries.append(res.summary)
        preds.append(prediction_rows(ps, res, targets))
        if ps.name in to_plot:
            plot_curves(
                res.curves,
                f"{ps.name} (shift {ps.shift:.2f}, α={alpha:g})",
                out / "plots" / f"curves_{_slug(ps.name)}.png",
            )
        log.info("pair %s: %s", ps.name, res.summary.set_index("head")["stream_spearman"].round(3).to_dict())
    curves_df, summary_df = pd.concat(curves, ignore_index=True), pd.concat(summaries, ignore_index=True)
    rls_heads = [rls_name(lam) for lam in (ocfg.forgetting or [])]
    gains = gains_table(summary_df, [h for h in summary_df["head"].unique() if h != "static"])
    curves_df.to_csv(out / "curves.csv", index=False)
    summary_df.to_csv(out / "summary.csv", index=False)
    gains.to_csv(out / "gains.csv", index=False)
    pd.concat(preds, ignore_index=True).to_parquet(out / "predictions.parquet", index=False)
    headline = headline_numbers(gains, rls_heads)
    if rls_heads and not gains.empty:
        plot_gain_vs_shift(gains, headline.get("best_rls", rls_heads[0]), out / "plots" / "gain_vs_shift.png")
    (out / "adapt.json").write_text(
        json.dumps(
            {"config": OmegaConf.to_container(ocfg, resolve=True), **headline}, indent=2, default=float
        )
    )
    if tracker is not None:
        tracker.summary(headline)
        for key, df in (("summary", summary_df), ("gains", gains), ("curves", curves_df)):
            tracker.log_table(f"online/{key}", list(df.columns), df.astype(object).values.tolist())
        for png in sorted((out / "plots").glob("*.png")):
            tracker.log_image(f"online/{png.stem}", png)
    return {"out_dir": str(out), "n_pairs": len(pairs), **headline}


def headline_numbers(gains: pd.DataFrame, rls_heads: Sequence[str]) -> dict[str, Any]:
    """Mean Spearman gain of each RLS head over static, on the smaller and the larger half of the shifts."""
    out: dict[str, Any] = {}
    g = gains[gains["head"].isin(rls_heads)]
    if g.empty:
        return out
    median = float(g["shift"].median())
    for h, gh in g.groupby("head"):
        for half, sel in (("small_shift", gh["shift"] <= median), ("large_shift", gh["shift"] > median)):
            out[f"{h}/{half}/stream_spearman_delta"] = float(gh.loc[sel, "stream_spearman_delta"].mean())
            out[f"{h}/{half}/stream_spearman_gain_pct"] = float(
                gh.loc[sel, "stream_spearman_gain_pct"].median()
            )
    best = g.groupby("head")["stream_spearman_delta"].mean().idxmax()
    out["best_rls"] = str(best)
    out["shift_median"] = median
    return out


def _pairs_to_plot(pairs: Sequence[dict], n: int | None, shift_key: str) -> set[str]:
    """All pairs (n = null) or the n/2 smallest- and n/2 largest-shift pairs (curves PNGs cost ≈1 s each)."""
    if n is None or n >= len(pairs):
        return {p["name"] for p in pairs}
    order = sorted(pairs, key=lambda p: float(p.get("shift", {}).get(shift_key, np.nan)))
    k = max(1, int(n) // 2)
    return {p["name"] for p in order[:k] + order[-k:]}


def _slug(name: str) -> str:
    return name.replace("->", "_to_").replace("/", "_")
