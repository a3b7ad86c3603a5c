"""The tables stage (scripts/make_tables.py): T1–T6 and plots from an experiment's results files only
(`lengthpred.eval.report.make_tables`), each other stage's output the newest of its name under `eval.experiment_dir`
(`lengthpred.stages.locations`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.eval.report import TableOutputs, make_tables
from lengthpred.paths import resolve
from lengthpred.stages import locations
from lengthpred.stages.tracking import tracked


def tables_from_config(cfg: DictConfig, tracker: Any) -> TableOutputs:
    """Write `eval.tables_dir`'s tables and plots from `eval.results_file` (+ `eval.extra_results`) and the
    newest simulate, costs and adapt outputs of `eval.experiment_dir`; log them to `tracker`."""
    e = cfg.eval
    root = resolve(e.experiment_dir)
    files = [resolve(e.results_file), *(resolve(p) for p in e.extra_results)]
    curves = locations.online_curves(root)
    out = make_tables(
        files,
        resolve(e.tables_dir),
        sched=locations.sched_results(root),
        latencies=locations.sched_latencies(root),
        curves=[curves] if curves else [],
        costs=locations.costs_file(root),
        online_summary=locations.online_summary(root),
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
    return out


def print_tables(cfg: DictConfig, out: TableOutputs) -> None:
    """Print the tables of `eval.print` (a line for those without inputs yet) and where they all went."""
    e = cfg.eval
    for key in e.print:
        if key in out.tables:
            print(out.tables[key].to_markdown())
        else:
            print(f"{key}: no inputs for this table yet\n")
    where = Path(resolve(e.tables_dir))
    print(f"tables: {', '.join(sorted(out.tables))} and {len(out.plots)} plots under {where}")


def run_make_tables(cfg: DictConfig, out: str | Path) -> Path:
    """The tables stage (`out`: its run folder): T1–T6 and plots into `eval.tables_dir`, logged to W&B, the
    tables of `eval.print` printed. Returns the tables folder."""
    with tracked(cfg, "tables") as tracker:
        tables = tables_from_config(cfg, tracker)
    print_tables(cfg, tables)
    return Path(resolve(cfg.eval.tables_dir))
