"""Paper tables T1–T6 and plots from results files only (no model needed); prints T1 and T3.

    .venv/bin/python scripts/make_tables.py experiment=demo
    .venv/bin/python scripts/make_tables.py eval.results_file=outputs/paper/results.csv 'eval.print=[T1,T2]'

Writes `<tables_dir>/T*.md|.tex|.csv` and `<tables_dir>/plots/*.png`, and logs them to W&B.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from lengthpred.cli import stage
from lengthpred.eval.report import make_tables
from lengthpred.paths import resolve
from lengthpred.stages.runs import newest
from lengthpred.tracking import tracked


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    e = cfg.eval
    root = resolve(e.experiment_dir)
    files = [resolve(e.results_file), *(resolve(p) for p in e.extra_results)]
    curves = newest(root, e.inputs.curves)
    with tracked(cfg, "tables") as tracker:
        out = make_tables(
            files,
            resolve(e.tables_dir),
            sched=newest(root, e.inputs.sched),
            latencies=newest(root, e.inputs.latencies),
            curves=[curves] if curves else [],
            costs=newest(root, e.inputs.costs),
            online_summary=newest(root, e.inputs.online_summary),
            predictions_root=resolve(e.input_dir),
            options=OmegaConf.to_container(e.tables, resolve=True),
            plot=bool(e.plots),
        )
        for key, table in out.tables.items():
            tracker.log_table(
                key,
                [c.name for c in table.columns],
                [[table.cell_text(c) for c in row] for row in table.rows],
            )
        for key, path in out.plots.items():
            tracker.log_image(key, path)
    for key in e.print:
        if key in out.tables:
            print(out.tables[key].to_markdown())
        else:
            print(f"{key}: no inputs for this table yet\n")
    where = Path(resolve(e.tables_dir))
    print(f"tables: {', '.join(sorted(out.tables))} and {len(out.plots)} plots under {where}")


if __name__ == "__main__":
    main()
