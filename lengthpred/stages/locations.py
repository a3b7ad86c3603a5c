"""Where every artefact and output of a composed config lives: the one module that spells these folders.

Outputs (git-ignored), from `conf/paths/default.yaml`:
- `paths.experiment_dir` = `outputs/<experiment_name>/`: every stage's runs (`runs/<time>/`, `multiruns/<time>/`,
  or `<stage>/` under `scripts/demo.py`), `results.csv` and `tables/`;
- `paths.output_dir`: this run's own folder (Hydra's `runtime.output_dir`).

Artefacts under `paths.data_dir` (docs/DESIGN.md "Artefacts"): the prepared prompt set
(`splits/<data.name>/`), merged generations (`generations/<model>/<data>/<settings-hash>/`), the committed
reference trace (`paths.reference_dir`: `reference/<model>/<data>.jsonl`) and feature stores (`features/<model>/<cache-key>/`,
`lengthpred.stages.features.feature_dir`).

Other stages' outputs are found here and nowhere else, by file name (`lengthpred.artefacts`) under the
experiment folder; when a name occurs more than once the newest wins by the one rule of `lengthpred.artefacts`
(the file written last: modification time in ns, then path).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lengthpred import artefacts as names
from lengthpred.artefacts import newest_output, oldest_first, outputs
from lengthpred.artefacts import splits_dir as data_splits_dir
from lengthpred.generate.settings import GenerationSettings
from lengthpred.generate.store import part_files
from lengthpred.paths import resolve


def experiment_dir(cfg: Any) -> Path:
    """`outputs/<experiment_name>/`: where every stage of one experiment writes."""
    return resolve(str(cfg.paths.experiment_dir))


def data_dir(cfg: Any) -> Path:
    return resolve(str(cfg.paths.data_dir))


def reference_dir(cfg: Any) -> Path:
    """`paths.reference_dir`: the committed reference traces (`<data_dir>/reference` in a config without it)."""
    ref = cfg.paths.get("reference_dir")
    return resolve(str(ref)) if ref else data_dir(cfg) / "reference"


def reference_path(cfg: Any) -> Path:
    """`<reference_dir>/<model>/<data>.jsonl`: the committed reference trace of a composed config."""
    return reference_dir(cfg) / str(cfg.model.name) / f"{cfg.data.name}.jsonl"


def generations_dir(cfg: Any, settings: GenerationSettings | None = None) -> Path:
    """`<data_dir>/generations/<model>/<data.name>/<settings-hash>/` of a composed config."""
    settings = settings or GenerationSettings.from_cfg(cfg.generate)
    return data_dir(cfg) / "generations" / str(cfg.model.name) / str(cfg.data.name) / settings.settings_hash()


def generation_parts(cfg: Any, settings: GenerationSettings | None = None) -> list[Path]:
    """The generate stage's part files (its shard layout: `lengthpred.generate.store.part_files`) of a composed
    config under `generations_dir`; none when it has not run at these settings."""
    return part_files(generations_dir(cfg, settings))


def splits_dir(cfg: Any) -> Path:
    """The prepared prompt set of a composed config: `data.out_dir` (`<data_dir>/splits/<data.name>/`)."""
    return data_splits_dir(cfg.data)


def splits_json(cfg: Any) -> Path:
    """`<splits_dir>/splits.json` of a composed config."""
    return splits_dir(cfg) / names.SPLITS_JSON


def predictions_files(root: str | Path) -> list[Path]:
    """Every predictions file under a run or experiment folder (or that file), oldest first."""
    return outputs(root, names.PREDICTIONS)


# the names stages find by scanning the whole experiment folder: predictions (`eval.input_dir`,
# `sched.source.predictions_path`) and the newest-of-its-name outputs the tables read
SCANNED = (names.PREDICTIONS, names.ONLINE_SUMMARY, names.CURVES, names.STREAM_CURVES, names.SCHED_RESULTS,
           names.SCHED_GAINS, names.SCHED_LATENCIES, names.COSTS)


def stray_outputs(exp_dir: str | Path, own: Iterable[str]) -> list[Path]:
    """Files with a `SCANNED` name under exp_dir outside the `own` stage folders (`<exp_dir>/<stage>/`), oldest
    first: what another script left where the scanning stages look (e.g. `scripts/stack.py` run into the
    experiment folder, a standalone run under `runs/`). The pipeline hashes them into those stages' keys."""
    root = Path(exp_dir)
    mine = [root / s for s in own]
    found = [f for name in SCANNED for f in outputs(root, name)]
    return oldest_first(f for f in found if not any(d in f.parents for d in mine))


def newest_run(exp_dir: str | Path, name: str) -> Path | None:
    """The folder of the newest output called `name` (a file name of `lengthpred.artefacts`) under exp_dir."""
    found = newest_output(exp_dir, name)
    return found.parent if found is not None else None


def online_summary(exp_dir: str | Path) -> Path | None:
    """The adapt stage's newest `summary.csv` (per-head update_ms for T6)."""
    return newest_output(exp_dir, names.ONLINE_SUMMARY)


def online_curves(exp_dir: str | Path) -> Path | None:
    """The adapt stage's newest `curves.csv` (the adaptation curves plot)."""
    return newest_output(exp_dir, names.CURVES)


def sched_results(exp_dir: str | Path) -> Path | None:
    """The simulate stage's newest `sched_results.csv` (T5)."""
    return newest_output(exp_dir, names.SCHED_RESULTS)


def sched_latencies(exp_dir: str | Path) -> Path | None:
    """The simulate stage's newest `sched_latencies.parquet` (latency CDF plot)."""
    return newest_output(exp_dir, names.SCHED_LATENCIES)


def costs_file(exp_dir: str | Path) -> Path | None:
    """The costs stage's newest `costs.json` (T6)."""
    return newest_output(exp_dir, names.COSTS)


def saved_heads(exp_dir: str | Path, stages: Sequence[str]) -> list[Path]:
    """The saved head folders (`<run>/head/head.json`) under `<exp_dir>/<stage>/` of each stage (a stage's
    name, or any folder under exp_dir, e.g. `train/linear`), linked run folders included, oldest first (so a
    head saved twice resolves to the newer by iterating)."""
    specs = [
        Path(d) / names.HEAD_SPEC
        for stage in stages
        for d, _, files in os.walk(Path(exp_dir) / stage, followlinks=True)
        if Path(d).name == names.HEAD and names.HEAD_SPEC in files
    ]
    return [f.parent for f in oldest_first(specs)]
