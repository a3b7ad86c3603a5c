"""The train stage's saved heads under an experiment's folder (`lengthpred.stages.locations.saved_heads`) with
what each run recorded (metrics.json, .hydra/config.yaml).

Run folders are timestamps (`runs/<time>/`, `multiruns/<time>/<job>/`) or a stage's name under
`scripts/demo.py` (`<experiment>/<stage>/`); see `lengthpred.stages.locations`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lengthpred.artefacts import HEAD_SPEC, METRICS
from lengthpred.costs.measure import HeadRun
from lengthpred.errors import DataError
from lengthpred.stages.features import feature_settings
from lengthpred.stages.locations import saved_heads

log = logging.getLogger(__name__)


def find_head_runs(exp_dir: str | Path, stages: Sequence[str]) -> list[HeadRun]:
    """The saved heads of these stages under exp_dir, one per head name (the newest wins,
    `lengthpred.artefacts`); feature/layer/pooling/model from the run's metrics.json (lengthpred.stages.train),
    features settings from its `.hydra/config.yaml` when there is one."""
    root = Path(exp_dir)
    found: dict[str, HeadRun] = {}
    for d in saved_heads(root, stages):
        name = str(json.loads((d / HEAD_SPEC).read_text())["head"])
        m = _read_json(d.parent / METRICS)
        hydra_cfg = d.parent / ".hydra" / "config.yaml"
        config = OmegaConf.load(hydra_cfg) if hydra_cfg.is_file() else None
        if name in found:
            log.info("costs: %s saved twice; using %s", name, d)
        found[name] = HeadRun(name, d, m.get("feature"), m.get("layer"), m.get("pooling"), m.get("model"),
                              config, _run_features(name, config))
    if not found:
        raise DataError(f"no saved heads under {root} of stage(s) {list(stages)}: run scripts/train.py first")
    return [found[k] for k in sorted(found)]


def _run_features(name: str, config: Any) -> Any:
    """The features settings a head was trained under (its run's config), or None."""
    if config is None:
        return None
    try:
        return feature_settings(config)
    except Exception as e:  # an unresolvable or older run config: time under the current one instead
        log.info("costs: %s: run config unusable for features (%s); using the current one", name, e)
        return None


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}
