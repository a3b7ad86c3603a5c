"""Score every predictions file of an experiment into one tidy results.csv (metrics with bootstrap CIs).

    .venv/bin/python scripts/evaluate.py experiment=demo
    .venv/bin/python scripts/evaluate.py eval.input_dir=outputs/demo/runs/<time> eval.n_boot=200

Reads `predictions.parquet` files under `eval.input_dir` (docs/DESIGN.md), the reference trace for the
noise ceiling and splits.json for shift sizes; writes `eval.results_file` and logs it to W&B.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from lengthpred.cli import stage
from lengthpred.eval.report import evaluate_run, headline
from lengthpred.eval.results import write_results
from lengthpred.paths import resolve
from lengthpred.stages.targets import prompt_samples
from lengthpred.tracking import tracked


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    e = cfg.eval
    reference = resolve(e.reference) if e.reference else None
    samples = None
    if (reference is None or not reference.is_file()) and e.ceiling_from_prompts:
        samples = prompt_samples(cfg)
    with tracked(cfg, "evaluate") as tracker:
        results = evaluate_run(
            resolve(e.input_dir),
            cfg,
            metrics=list(e.metrics),
            n_boot=int(e.n_boot),
            seed=int(e.seed),
            confidence=float(e.confidence),
            params=OmegaConf.to_container(e.params, resolve=True),
            paired_baselines=list(e.paired.baselines),
            paired_metrics=list(e.paired.metrics),
            paired_heads=list(e.paired.heads),
            paired_splits=list(e.paired.splits),
            reference=reference,
            samples=samples,
            splits_json=resolve(e.splits_json) if e.splits_json else None,
            shift_key=str(e.shift_key),
            pool_indomain=bool(e.pool_indomain),
        )
        path = write_results(results, resolve(e.results_file))
        shown = results.drop(columns=["source"], errors="ignore").astype(str)
        tracker.log_table("results", list(shown.columns), shown.values.tolist())
        tracker.summary(headline(results))
    heads, splits = results["head"].nunique(), results["split"].nunique()
    print(f"evaluate: {len(results)} rows ({heads} heads x {splits} splits) -> {path}")


if __name__ == "__main__":
    main()
