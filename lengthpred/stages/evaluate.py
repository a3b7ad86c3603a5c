"""The evaluate stage: every predictions file of a run folder scored into one tidy results.csv.

Reads `predictions.parquet` files under `eval.input_dir`, the reference trace (or the prompts' samples)
for the noise ceiling and splits.json for shift sizes; writes `eval.results_file` and logs it.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lengthpred.eval.report import evaluate_run, headline
from lengthpred.eval.results import write_results
from lengthpred.eval.settings import STAGE_KEYS, EvalSettings
from lengthpred.paths import resolve
from lengthpred.stages.locations import splits_json
from lengthpred.stages.provenance import provenance_of
from lengthpred.stages.targets import prompt_samples
from lengthpred.stages.tracking import tracked


def eval_settings(cfg: DictConfig) -> EvalSettings:
    """`cfg.eval`'s scoring keys as plain settings (the stage keys stay here)."""
    e = cfg.eval
    plain = {k: OmegaConf.to_container(e[k], resolve=True) if OmegaConf.is_config(e[k]) else e[k]
             for k in e if k not in STAGE_KEYS}
    return EvalSettings.from_mapping(plain)


def run_evaluate(cfg: DictConfig, out: str | Path) -> Path:
    """The evaluate stage (`out`: its run folder): score `eval.input_dir` into `eval.results_file` (the
    experiment's, which every later stage reads), logged to W&B (opened once the noise ceiling's inputs are
    read, closed before the summary line is printed). Returns the results file."""
    e = cfg.eval
    settings = eval_settings(cfg)
    reference = resolve(e.reference) if e.reference else None
    samples = None
    if (reference is None or not reference.is_file()) and e.ceiling_from_prompts:
        samples = prompt_samples(cfg)
    with tracked(cfg, "evaluate") as tracker:
        results = evaluate_run(
            resolve(e.input_dir),
            provenance_of(cfg),
            reference=reference,
            samples=samples,
            splits_json=resolve(e.splits_json) if e.splits_json else splits_json(cfg),
            **settings.scoring(),
        )
        path = write_results(results, resolve(e.results_file))
        tracker.log_frame("results", results.drop(columns=["source"], errors="ignore"))
        tracker.summary(headline(results))
    heads, splits = results["head"].nunique(), results["split"].nunique()
    print(f"evaluate: {len(results)} rows ({heads} heads x {splits} splits) -> {path}")
    return path
