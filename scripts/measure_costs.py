"""Costs of the experiment's trained heads for table T6: parameters, predict latency (batch size 1),
update latency of the online rls@λ heads and extraction overhead relative to a plain prefill.

    .venv/bin/python scripts/measure_costs.py experiment=demo
    .venv/bin/python scripts/measure_costs.py experiment=demo costs.extract_prompts=8 costs.extract_repeats=5

Reads outputs/<experiment>/train*/<head>/head (scripts/train.py), the feature store and the serving model;
writes costs.json into the run directory (outputs/<experiment>/runs/<time>/), which scripts/make_tables.py
picks up (lengthpred.stages.locations.costs_file). Keys: conf/costs/default.yaml.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.artefacts import COSTS
from lengthpred.cli import stage
from lengthpred.costs import write_costs
from lengthpred.stages.costs import costs_from_config
from lengthpred.stages.locations import run_dir
from lengthpred.tracking import tracked

COLUMNS = ["head", "n_parameters", "extraction_overhead_pct", "predict_latency_ms", "update_latency_ms"]


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    with tracked(cfg, "costs") as tracker:
        doc = costs_from_config(cfg)
        path = write_costs(doc, run_dir(cfg) / COSTS)
        table = [[r.get(c) for c in COLUMNS] for r in doc["rows"]]
        tracker.log_table("costs", COLUMNS, table)
    ext = doc["meta"]["extraction"]
    for r in doc["rows"]:
        cells = [f"{c}={r[c]:.4g}" for c in COLUMNS[1:] if r.get(c) is not None]
        print(f"{r['head']:>14s}  {'  '.join(cells)}")
    used = f"{ext['n_prompts']} prompts × {ext['repeats']} reps" if ext else "none"
    print(
        f"costs of {len(doc['rows'])} heads (extraction timing: {used}) in {doc['meta']['seconds']['total']:.1f} s → {path}"
    )


if __name__ == "__main__":
    main()
