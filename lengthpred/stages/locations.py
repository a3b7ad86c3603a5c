"""Where every artefact and output of a composed config lives: the one module that spells these folders.

Outputs (git-ignored), from `conf/paths/default.yaml`:
- `paths.experiment_dir` = `outputs/<experiment_name>/`: every stage's runs (`runs/<time>/`, `multiruns/<time>/`,
  or `<stage>/` under `scripts/demo.py`), `results.csv` and `tables/`;
- `paths.output_dir`: this run's own folder (Hydra's `runtime.output_dir`).

Artefacts under `paths.data_dir` (docs/DESIGN.md "Artefacts"): the prepared prompt set
(`splits/<data.name>/`), merged generations (`generations/<model>/<data>/<settings-hash>/`), the committed
reference trace (`paths.reference_dir`: `reference/<model>/<data>.jsonl`) and feature stores (`features/<model>/<cache-key>/`,
`lengthpred.stages.features.feature_dir`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lengthpred.generate.settings import GenerationSettings
from lengthpred.paths import resolve


def experiment_dir(cfg: Any) -> Path:
    """`outputs/<experiment_name>/`: where every stage of one experiment writes."""
    return resolve(str(cfg.paths.experiment_dir))


def run_dir(cfg: Any) -> Path:
    """This run's own folder (`paths.output_dir`)."""
    return Path(str(cfg.paths.output_dir))


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
