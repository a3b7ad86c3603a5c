"""Refined SRPT/SJF on T5's workloads (issue 27 item 4): which source each row's predictions come from is in
lengthpred/sched/sweep/refined.py; the rows and the noise model's settings in conf/sched/default.yaml `refined`.

    python scripts/simulate_refined.py sched.source.predictions_path=outputs/demo

Writes refined_runs.csv, refined_results.csv, refined_gains.csv, refined.md and refined.json into the run folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from lengthpred.cli import stage
from lengthpred.paths import resolve
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.core.refine import fit_sigma, read_curve_spearman
from lengthpred.sched.sweep import refined as rf
from lengthpred.sched.sweep.summary import gains, summarize_runs
from lengthpred.stages.simulate import load_source


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    sc, rc = cfg.sched, cfg.sched.refined
    out = Path(sc.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    profile = get_profile(sc.hardware, OmegaConf.to_container(sc.hardware_overrides))
    entries = rf.parse_entries(OmegaConf.to_container(rc.entries, resolve=True))
    src = load_source(cfg)
    lengths = rf.pool_lengths(src)
    curve = resolve(str(rc.curve))
    # `spearman` ({t: Spearman}) replaces the measured curve: a what-if decode head, not a measurement
    target = ({float(k): float(v) for k, v in rc.spearman.items()} if rc.get("spearman")
              else read_curve_spearman(curve, str(rc.decode_head)))
    sigma_decode = fit_sigma(lengths, target, seed=int(cfg.seed))
    prompt_rho = read_curve_spearman(curve, str(rc.prompt_row))[0.0]
    sigma_prompt = fit_sigma(lengths, {0.0: prompt_rho}, seed=int(cfg.seed))[0.0]
    print(f"source {src.name}: {len(src.output)} prompts; decode-cal sigma(t) {sigma_decode} (Spearman {target}); "
          f"prompt-cal sigma {sigma_prompt:.3f} (Spearman {prompt_rho})")
    runs = rf.run_refined(src, profile, entries, head=str(rc.head), loads=list(rc.loads), seeds=list(rc.seeds),
                          n_requests=int(rc.n_requests), every=int(rc.every), sigma_decode=sigma_decode,
                          sigma_prompt=sigma_prompt, rho=float(rc.rho), sim=OmegaConf.to_container(sc.sim))
    summary = summarize_runs(runs)
    gain = gains(runs, min_oracle_gain=float(sc.min_oracle_gain))
    runs.to_csv(out / "refined_runs.csv", index=False)
    summary.to_csv(out / "refined_results.csv", index=False)
    gain.to_csv(out / "refined_gains.csv", index=False)
    parts = []
    for load in rc.loads:
        parts.append(f"**load {load}**, {len(rc.seeds)} seeds, {rc.n_requests} requests each, {profile.name}\n\n"
                     + rf.markdown_table(summary, gain, float(load), entries))
    (out / "refined.md").write_text("\n\n".join(parts) + "\n")
    (out / "refined.json").write_text(json.dumps({"source": src.name, "sigma_decode": sigma_decode,
                                                  "sigma_prompt": sigma_prompt, "target": target,
                                                  "prompt_spearman": prompt_rho,
                                                  "config": OmegaConf.to_container(sc, resolve=True)},
                                                 indent=1, default=str))
    print(rf.markdown_table(summary, gain, float(rc.table_load), entries))
    print(f"→ {out}")


if __name__ == "__main__":
    main()
