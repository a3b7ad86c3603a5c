"""The speculative-decoding stage (scripts/simulate_spec.py): LAPS-SD, SJF/SRPT, MLFQ and FCFS on the measured
n-gram acceptance (`sched.spec.path`, made by `lengthpred.stages.acceptance`) beside Beta models
(`lengthpred.sched.spec.experiment`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.spec import acceptance as sa
from lengthpred.sched.spec import experiment as se
from lengthpred.sched.spec import report as rep
from lengthpred.sched.spec.records import read_records
from lengthpred.sched.sweep.experiment import parse_policies
from lengthpred.sched.sweep.sources import POOLED_TEST, read_prediction_files

log = logging.getLogger("lengthpred")


def head_predictions(path: str) -> dict[str, dict[str, float]]:
    """Each head's pooled in-domain test predictions by prompt id (the newest file per head)."""
    df = read_prediction_files(path)
    df = df[df["split"].astype(str).str.fullmatch(POOLED_TEST.replace("*", "[^/]+"))]
    return {str(h): {str(i): float(v) for i, v in g.groupby("id")["y_pred"].first().items()}
            for h, g in df.groupby("head")}


def run_spec(cfg: DictConfig, out: str | Path, progress: bool = True) -> Path:
    """Every policy × acceptance regime × load on the measured answers: writes the spec tables, acceptance
    summaries and figure into `out` and prints them. Returns the folder."""
    sc = cfg.sched.spec
    out = Path(out)
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
