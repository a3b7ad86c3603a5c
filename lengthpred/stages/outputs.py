"""What a stage wrote outside its run folder, declared for the pipeline's stage markers.

A stage whose product lives under `data/` (the prepared prompt set, generations, a feature store, the model
cache) names it with `declare_outputs(cfg, path)`: the paths go to `<run folder>/_outputs.json`, and
`lengthpred.pipeline.run_stage` records them (with their content digests) in the stage's marker, so a deleted
output reruns its stage and a changed one reruns the stages after it. Outside a Hydra run (tests, a library
call) there is no run folder and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lengthpred.integrity import atomic_write_text

OUTPUTS = "_outputs.json"


def run_dir(cfg: Any) -> Path:
    """This run's own folder (`paths.output_dir`): the `out` every stage script hands its stage."""
    return Path(str(cfg.paths.output_dir))


def read_outputs(run_dir: Path) -> list[str]:
    """The paths a run declared (none when it declared none or the file is damaged)."""
    try:
        return list(json.loads((run_dir / OUTPUTS).read_text()))
    except (OSError, ValueError):
        return []


def declare_outputs(cfg: Any, *paths: str | Path) -> None:
    """Add `paths` (absolute) to this run's `_outputs.json`."""
    try:
        run_dir = OmegaConf.select(cfg, "paths.output_dir", default=None, throw_on_resolution_failure=True)
    except (OmegaConfBaseException, ValueError):  # no Hydra run (a config composed in-process)
        return
    if not run_dir:
        return
    run_dir = Path(str(run_dir))
    have = read_outputs(run_dir)
    new = [str(Path(p).resolve()) for p in paths]
    atomic_write_text(run_dir / OUTPUTS, json.dumps(have + [p for p in new if p not in have], indent=1))
