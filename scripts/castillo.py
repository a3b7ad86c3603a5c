"""Cross-model length prediction on CASTILLO: 13 models' sampled lengths, one shared split, one prefill per prompt.

    .venv/bin/python scripts/castillo.py experiment=castillo                        # the full run (make castillo)
    .venv/bin/python scripts/castillo.py experiment=castillo data.per_dataset=8 \
        crossmodel.docs_dir=null                                                     # a small real slice
    .venv/bin/python scripts/castillo.py experiment=castillo crossmodel.proxy_heads=[]   # without MiniLM fits

Writes results.csv, T7 tables, transfer heatmaps and summary.json (stage times) into the run directory
(outputs/castillo/runs/<time>/), and the tables and figures into docs/ (crossmodel.docs_dir).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.castillo import run_castillo
from lengthpred.stages.locations import run_dir
from lengthpred.tracking import tracked


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    with tracked(cfg, "castillo") as tracker:
        s = run_castillo(cfg, run_dir(cfg))
        tracker.summary({f"seconds/{k}": v for k, v in s["seconds"].items()})
    with open(f"{run_dir(cfg)}/tables/T7_summary.md", encoding="utf-8") as f:
        print(f.read())
    u = s["union"]
    if u["missing_by_design"]:
        print(f"not in CASTILLO (reported as 'no file'): {', '.join(u['missing_by_design'])}")
    for m in u["missing"]:
        print(f"warning: missing {m}")
    if u["bad_input_skipped"]:
        print(f"bad rows skipped: {u['bad_input_skipped']}")
    for w in s["coverage_warnings"]:
        print(f"warning: {w}")
    print(f"{s['n_prompts_run']} of {s['n_prompts_union']} union prompts; stage seconds {s['seconds']}")


if __name__ == "__main__":
    main()
