"""LAPS-SD, SJF/SRPT, MLFQ and FCFS under speculative decoding: measured n-gram acceptance beside Beta models.

    make spec                                                   # measure (if its file is missing), then this
    python scripts/simulate_spec.py data=bench                  # on data/reference/smollm2-135m/spec_ngram_bench.parquet
    python scripts/simulate_spec.py data=bench sched.spec.predictions_path=outputs/bench   # + the heads' sjf/srpt/laps-sd

Requests are drawn from the measured answers (`sched.spec.path`, made by scripts/measure_acceptance.py), each with
its measured length; the acceptance regimes (measured, measured-rate, beta-matched, beta-7-3) are described in
lengthpred/sched/spec_experiment.py. Profile `sched.spec.hardware` with n_draft = the drafter's k and t_draft =
`sched.spec.t_draft`. Writes into the run dir: spec_runs.csv (tidy, per seed), spec_results.csv (means with
bootstrap CIs), spec_gains.csv (vs FCFS and vs MLFQ), spec_table.csv + spec_table.md (the comparison),
acceptance.md + acceptance.csv + acceptance_requests.csv (how variable acceptance is), spec_latency.png, spec.json.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from lengthpred.cli import stage
from lengthpred.sched import spec_acceptance as sa
from lengthpred.sched import spec_experiment as se
from lengthpred.sched import spec_report as rep
from lengthpred.sched.experiment import parse_policies
from lengthpred.sched.hardware import get_profile
from lengthpred.sched.spec_records import read_records

log = logging.getLogger("lengthpred")


def head_predictions(path: str) -> dict[str, dict[str, float]]:
    """Each head's pooled in-domain test predictions by prompt id (the newest file per head)."""
    from lengthpred.sched.sources import POOLED_TEST, read_prediction_files

    df = read_prediction_files(path)
    df = df[df["split"].astype(str).str.fullmatch(POOLED_TEST.replace("*", "[^/]+"))]
    return {str(h): {str(i): float(v) for i, v in g.groupby("id")["y_pred"].first().items()}
            for h, g in df.groupby("head")}


def run(cfg: DictConfig, progress: bool = True) -> Path:
    sc = cfg.sched.spec
    out = Path(cfg.sched.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = read_records(sc.path)
    preds = head_predictions(sc.predictions_path) if sc.predictions_path else None
    pool = se.measured_pool(records, preds)
    profile = se.spec_profile(get_profile(sc.hardware, OmegaConf.to_container(sc.hardware_overrides)),
                              records.k, sc.t_draft)
    early = list(sc.early_k)
    stats = sa.request_stats(records.frame, records.k, early)
    var = sa.variability_summary(stats, records.frame, records.k, early)
    doms = sa.by_domain(stats)
    a, b = sa.beta_moments(pool.accept)
    print(f"{len(records)} measured answers ({records.path}), drafter {records.meta['drafter']}; profile {profile.name} "
          f"(n_draft {profile.n_draft}, t_draft {profile.t_draft}); moment-matched Beta({a:.3g}, {b:.3g})")
    runs = se.run_spec_grid(pool, profile, parse_policies(OmegaConf.to_container(sc.policies)),
                            regimes=list(sc.regimes), loads=list(sc.loads), seeds=list(sc.seeds),
                            n_requests=int(sc.n_requests),
                            sim={**OmegaConf.to_container(cfg.sched.sim), **OmegaConf.to_container(sc.sim)},
                            random_predictor=bool(sc.random_predictor), progress=progress)
    summary, gain = se.summarize_spec(runs)
    table = se.spec_table(summary, gain)
    runs.to_csv(out / "spec_runs.csv", index=False)
    summary.to_csv(out / "spec_results.csv", index=False)
    gain.to_csv(out / "spec_gains.csv", index=False)
    table.to_csv(out / "spec_table.csv", index=False)
    stats.to_csv(out / "acceptance_requests.csv", index=False)
    var.to_csv(out / "acceptance.csv", index=False)
    acc_md = rep.acceptance_markdown(var, doms)
    (out / "acceptance.md").write_text(acc_md + "\n")
    (out / "spec_table.md").write_text(rep.table_markdown(table) + "\n")
    (out / "spec.json").write_text(json.dumps({
        "hardware": profile.to_dict(), "records": str(records.path), "records_meta": records.meta,
        "beta_matched": [a, b], "config": OmegaConf.to_container(sc, resolve=True)}, indent=1))
    if sc.plots:
        rep.plot_regimes(summary, out / "spec_latency.png")
    print(acc_md + "\n\n" + rep.table_markdown(table))
    print(f"wrote {out}/spec_table.md (+ csv, runs, results, gains, acceptance, figure)")
    return out


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
