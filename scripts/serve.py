"""Serve test prompts on a real vLLM engine under FCFS / predicted-SJF / oracle priorities, and check the
simulator against it.

    make serve                                                     # the default comparison, from .venv-vllm
    VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=2 OMP_WAIT_POLICY=PASSIVE \
      .venv-vllm/bin/python scripts/serve.py experiment=demo       # the same, by hand
    .venv-vllm/bin/python scripts/serve.py serve=smoke             # ≈2 min: does the engine serve and time?
    python scripts/serve.py serve.engine.kind=fake                 # the fake engine (known step times), any venv

Writes into the run dir (schemas in lengthpred/serve/experiment.py): serve_runs.csv (tidy, T5 format: real
and simulated), serve_results.csv (means over repeats with 95% CIs), serve_gains.csv (vs FCFS),
serve_fidelity.csv + fidelity_summary.csv (simulated vs real on the calibration profile),
fidelity_in_sample_summary.csv (on a profile refitted on every run), step_residuals.csv (step-time model vs
measured per regime), serve_requests.parquet, serve_steps.parquet, calibration_steps.parquet, profile.json,
serve.json, serve_latency_cdf.png, serve_queue.png; prints the tables.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from lengthpred.cli import stage
from lengthpred.models import load_tokenizer
from lengthpred.sched.summary import gains, summarize_runs
from lengthpred.serve import report
from lengthpred.serve.experiment import fidelity_summary, run_grid
from lengthpred.serve.profile_fit import ProfileFit, profile_from_dict
from lengthpred.stages import serve as setup
from lengthpred.tracking import Tracker, tracked

log = logging.getLogger("lengthpred")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    with tracked(cfg, "serve") as tracker:
        _run(cfg, tracker)


def _run(cfg: DictConfig, tracker: Tracker) -> None:
    sc = cfg.serve
    out = Path(sc.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = setup.settings_from_cfg(cfg)
    tokenizer = load_tokenizer(hydra.utils.instantiate(cfg.model))
    pool, prompts, splits, targets = setup.load_inputs(cfg, tokenizer)
    make_predictor = setup.predictor_factory(cfg, pool, prompts, splits, targets, tokenizer)
    engine, clock = setup.make_engine(cfg)
    fit = None
    if sc.profile_path:
        d = json.loads(Path(sc.profile_path).read_text())
        fit = ProfileFit(profile_from_dict(d), int(d.get("n_steps", 0)), float(d.get("r2", "nan")),
                         float(d.get("rel_rmse", "nan")), float(d.get("mean_step_s", "nan")))
    print(f"serve: {len(pool)} {sc.split} prompts, {settings.n_requests} requests per run, loads {settings.loads}, "
          f"repeats {settings.seeds}, policies {settings.policies}; engine {engine.name} (max_num_seqs "
          f"{engine.limits.max_batch}, {engine.limits.kv_blocks} KV blocks of {engine.limits.block_size})", flush=True)
    res = run_grid(engine, pool, settings, make_predictor, clock=clock, fit=fit,
                   progress=lambda msg: print(msg, flush=True))
    runs = res.runs.copy()
    runs.insert(0, "experiment", cfg.experiment_name)
    summary = summarize_runs(runs.drop(columns="experiment"))
    summary.insert(0, "experiment", cfg.experiment_name)
    real = runs[runs["hardware"] == engine.name].drop(columns="experiment")
    gain = gains(real)
    fsum, fsum_all = fidelity_summary(res.fidelity), fidelity_summary(res.fidelity_all)
    runs.to_csv(out / "serve_runs.csv", index=False)
    summary.to_csv(out / "serve_results.csv", index=False)
    gain.to_csv(out / "serve_gains.csv", index=False)
    res.fidelity.to_csv(out / "serve_fidelity.csv", index=False)
    fsum.to_csv(out / "fidelity_summary.csv", index=False)
    fsum_all.to_csv(out / "fidelity_in_sample_summary.csv", index=False)
    if res.calibration is not None:
        res.calibration.steps.to_parquet(out / "calibration_steps.parquet", index=False)
    res.residuals.to_csv(out / "step_residuals.csv", index=False)
    res.requests.to_parquet(out / "serve_requests.parquet", index=False)
    res.steps.to_parquet(out / "serve_steps.parquet", index=False)
    (out / "profile.json").write_text(json.dumps(res.fit.to_dict(), indent=1))
    (out / "serve.json").write_text(json.dumps({
        "engine": engine.name, "limits": asdict(engine.limits), "capacity_req_s": res.capacity,
        "profile": res.fit.to_dict(), "profile_all_runs": res.fit_all.to_dict() if res.fit_all else None,
        "overload": res.overload, "config": OmegaConf.to_container(sc, resolve=True)}, indent=1, default=str))
    table, ftable = report.results_table(summary, engine.name), report.fidelity_table(fsum)
    if sc.plots and not res.requests.empty:
        report.plot_latency_cdf(res.requests, out / "serve_latency_cdf.png")
        report.plot_queue(res.steps, out / "serve_queue.png")
        tracker.log_image("serve_latency_cdf", out / "serve_latency_cdf.png")
    tracker.log_table("serve_fidelity", list(fsum.columns), fsum.values.tolist())
    print(f"\n**Real engine ({engine.name}), means over {len(settings.seeds)} repeats [95% CI]**\n\n{table}")
    print(f"\n**Simulator ({res.fit.profile.name}) vs real**\n\n{ftable}")
    if len(fsum_all):
        worst = fsum_all[fsum_all["metric"].isin([c[0] for c in report.FID_COLUMNS])]["max_abs_err"].max()
        print(f"\nIn sample (profile refitted on every run's steps, {res.fit_all.profile.name}): worst |error| "
              f"{100 * worst:.1f}%; if this is small and the table above is not, the calibration burst is at fault, "
              f"not the model's form")
    print(f"\nstep-time model vs measured (calibration profile):\n{res.residuals.to_string(index=False)}")
    print(f"\nwrote {out}/serve_results.csv (+ runs, gains, fidelity, requests, steps, profile, plots)")


if __name__ == "__main__":  # the guard vLLM's engine process would need
    main()
