"""Finding an experiment's saved heads (the train stage's `<experiment>/train/<head>/head`) and what each
run recorded: its metrics.json and its `.hydra/config.yaml`."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lengthpred.errors import DataError

log = logging.getLogger(__name__)


@dataclass
class HeadRun:
    """A saved head and what its run recorded (metrics.json): `feature` (e.g. hs.L20.last) for heads that
    read a pooled column, `layer`/`pooling` (`learned` for token-level heads), the model, and the run's
    `.hydra/config.yaml` when there is one (its features config: the store the head was trained on)."""

    name: str
    head_dir: Path
    feature: str | None = None
    layer: int | None = None
    pooling: str | None = None
    model: str | None = None
    config: Any = None



def find_head_runs(exp_dir: str | Path, patterns: Sequence[str]) -> list[HeadRun]:
    """Saved heads matching the globs under exp_dir, one per head name (the last in path order wins);
    feature/layer/pooling/model from the run's metrics.json (lengthpred.heads.run)."""
    root = Path(exp_dir)
    found: dict[str, HeadRun] = {}
    for pattern in patterns:
        for d in sorted(root.glob(pattern)):
            if not (d / "head.json").is_file():
                continue
            name = str(json.loads((d / "head.json").read_text())["head"])
            m = _read_json(d.parent / "metrics.json")
            hydra_cfg = d.parent / ".hydra" / "config.yaml"
            config = OmegaConf.load(hydra_cfg) if hydra_cfg.is_file() else None
            if name in found:
                log.info("costs: %s saved twice; using %s", name, d)
            found[name] = HeadRun(
                name, d, m.get("feature"), m.get("layer"), m.get("pooling"), m.get("model"), config
            )
    if not found:
        raise DataError(f"no saved heads under {root} matching {list(patterns)}: run scripts/train.py first")
    return [found[k] for k in sorted(found)]


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}
