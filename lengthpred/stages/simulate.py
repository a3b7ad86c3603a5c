"""The simulate stage (scripts/simulate.py, T5): policies × predictors × loads on the requests of
`sched.source.kind` (the heads' pool: `lengthpred.stages.head_pool`, shared with the traces and batching
stages). Imports nothing heavy (no torch)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from lengthpred.artefacts import SCHED_GAINS, SCHED_LATENCIES, SCHED_RESULTS
from lengthpred.errors import ConfigError
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.sweep import experiment as ex
from lengthpred.sched.sweep import sources
from lengthpred.sched.sweep.plots import plot_gain_and_starvation
from lengthpred.sched.sweep.pool import LengthSource
from lengthpred.stages.head_pool import has_predictions, load_head_pool
from lengthpred.stages.tracking import tracked

__all__ = ["load_source", "pool_stats", "run_simulate", "simulate_into"]

log = logging.getLogger("lengthpred")


def load_source(cfg: DictConfig) -> LengthSource:
    """The simulated requests' source of `sched.source.kind` (auto: the heads' predictions if any, else CASTILLO)."""
    sc, seed = cfg.sched, cfg.seed
    s = sc.source
    kind = s.kind
    if kind == "auto":
        kind = "predictions" if has_predictions(s.predictions_path) else "castillo"
        log.info("sched.source.kind=auto → %s", kind)
    if kind == "predictions":
        return load_head_pool(cfg, s.predictions_path, split=s.split, heads=list(s.heads) if s.heads else None,
                              samples=bool(s.samples), prompt_tokens=int(s.prompt_tokens))
    if kind == "castillo":
        return sources.from_castillo(
            s.castillo_root,
            model=s.castillo_model,
            datasets=list(s.castillo_datasets),
            noisy_spearman=list(s.noisy_spearman),
            seed=seed,
        )
    if kind == "synthetic":
        return sources.synthetic(
            s.synthetic_n,
            median=s.synthetic_median,
            sigma=s.synthetic_sigma,
            prompt_tokens=s.prompt_tokens,
            noisy_spearman=list(s.noisy_spearman),
            n_samples=s.synthetic_samples,
            sample_sigma=s.synthetic_sample_sigma,
            seed=seed,
        )
    if kind == "trace":
        if not s.trace_path:
            raise ConfigError("sched.source.kind=trace needs sched.source.trace_path")
        return sources.from_trace(s.trace_path)
    raise ConfigError(f"sched.source.kind={kind!r}; valid: auto, predictions, castillo, synthetic, trace")


def pool_stats(src: LengthSource) -> dict:
    """What the requests are drawn from: prompts, samples per prompt, prompt tokens (for sched.json)."""
    n = [len(x) for x in src.samples] if src.has_samples else [1] * len(src.output)
    return {"prompts": len(src.output), "samples_per_prompt_mean": float(np.mean(n)),
            "prompt_tokens_mean": float(np.mean(src.prompt)), "prompt_tokens_min": int(np.min(src.prompt)),
            "prompt_tokens_max": int(np.max(src.prompt))}


def simulate_into(cfg: DictConfig, out: str | Path, tracker: Any) -> Path:
    """Policies × predictors × loads on `sched.hardware`: writes the T5 inputs into `out` (schemas in
    lengthpred/sched/sweep/experiment.py), logs them to `tracker` and prints a small T5. Returns the folder."""
    sc = cfg.sched
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    profile = get_profile(sc.hardware, OmegaConf.to_container(sc.hardware_overrides))
    policies = ex.parse_policies(OmegaConf.to_container(sc.policies))
    src = load_source(cfg)
    truth = "one sampled length per request" if src.has_samples else "no samples: a request's length is its prompt's"
    print(f"source {src.name}: {len(src.output)} prompts ({truth}), {np.mean(src.prompt):.0f} prompt tokens on "
          f"average, predictors {sorted(src.preds)}; hardware {profile.name}")
    runs, lat = ex.run_grid(
        src,
        profile,
        policies,
        loads=list(sc.loads),
        seeds=list(sc.seeds),
        n_requests=sc.n_requests,
        predictors=list(sc.predictors) if sc.predictors else None,
        online=sc.online,
        arrival=sc.arrival,
        cv=sc.arrival_cv,
        accept_beta=tuple(sc.accept_beta),
        speculative=sc.speculative,
        warmup=sc.warmup,
        sim=OmegaConf.to_container(sc.sim),
        mean_oracle=sc.mean_oracle,
        random_predictor=sc.random_predictor,
    )
    runs.insert(0, "experiment", cfg.experiment_name)
    summary = ex.summarize_runs(runs.drop(columns="experiment"))
    summary.insert(0, "experiment", cfg.experiment_name)
    gains = ex.gains(runs, min_oracle_gain=float(sc.min_oracle_gain))
    runs.to_csv(out / "sched_runs.csv", index=False)
    summary.to_csv(out / SCHED_RESULTS, index=False)
    gains.to_csv(out / SCHED_GAINS, index=False)
    lat.to_parquet(out / SCHED_LATENCIES, index=False)
    (out / "sched.json").write_text(
        json.dumps(
            {
                "hardware": profile.to_dict(),
                "source": src.name,
                "pool": pool_stats(src),
                "config": OmegaConf.to_container(sc, resolve=True),
            },
            indent=1,
        )
    )
    key = summary[summary["metric"] == ex.KEY]
    tracker.log_table("sched_results", ["policy", "predictor", "load", "value", "ci_low", "ci_high"],
                      key[["policy", "predictor", "load", "value", "ci_low", "ci_high"]].values.tolist())
    if sc.plots:
        ex.plot_latency_vs_load(summary, out / "latency_vs_load.png")
        tracker.log_image("latency_vs_load", out / "latency_vs_load.png")
        plot_gain_and_starvation(summary, gains, out / "gain_vs_load.png")
        tracker.log_image("gain_vs_load", out / "gain_vs_load.png")
    print(ex.format_table(summary, gains))
    print("\n" + ex.short_t5(summary, gains))
    print(f"wrote {out / SCHED_RESULTS} (+ runs, gains, latencies, plot)")
    return out


def run_simulate(cfg: DictConfig, out: str | Path) -> Path:
    """The simulate stage (scripts/simulate.py): `simulate_into(cfg, out, tracker)` with its W&B run. Returns the folder."""
    with tracked(cfg, "simulate") as tracker:
        return simulate_into(cfg, out, tracker)
