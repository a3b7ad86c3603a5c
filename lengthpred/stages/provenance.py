"""Provenance of predictions from composed configs: the stage layer reads a run's config (the live one or a
run's saved `.hydra/config.yaml`) and hands `lengthpred.eval` plain values only."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lengthpred.eval.results import HASHED_GROUPS, Provenance, ProvenanceOf, provenance_from


def provenance(cfg: DictConfig) -> Provenance:
    """A composed (or saved) config's provenance: its names resolved, its hashed groups as written."""
    model = cfg.get("model") or {}
    data = cfg.get("data") or {}
    groups = {g: OmegaConf.to_container(cfg[g], resolve=False) for g in HASHED_GROUPS if g in cfg}
    return provenance_from(
        str(cfg.get("experiment_name", "default")),
        str(model.get("name", "unknown")),
        str(data.get("name", "unknown")),
        groups,
    )


def provenance_of(cfg: DictConfig | None) -> ProvenanceOf:
    """For `lengthpred.eval`: a run's saved config file → its provenance; None → `cfg`'s own (an empty config's
    when there is none)."""
    own = provenance(cfg if cfg is not None else OmegaConf.create({}))

    def of(path: Path | None) -> Provenance:
        return own if path is None else provenance(OmegaConf.load(path))

    return of
