"""Glue for the thin Hydra entry points in `scripts/`: resolvers and the heads' constructor defaults
(registered on import, before any config is composed), one-line errors (and `parse_shard`, from
`lengthpred.stages.shards`)."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import LengthpredError
from lengthpred.paths import REPO_ROOT, default_datasets_root
from lengthpred.stages.heads import register_head_params
from lengthpred.stages.shards import parse_shard

log = logging.getLogger("lengthpred")
__all__ = ["parse_shard", "register_resolvers", "stage"]


def register_resolvers() -> None:
    """`${lp.repo:}` and `${lp.datasets_root:}` so configs work from any working directory."""
    if not OmegaConf.has_resolver("lp.repo"):
        OmegaConf.register_new_resolver("lp.repo", lambda: str(REPO_ROOT))
    if not OmegaConf.has_resolver("lp.datasets_root"):
        OmegaConf.register_new_resolver("lp.datasets_root", lambda: str(default_datasets_root()))


register_resolvers()
register_head_params()  # conf/head/*.yaml start from each head constructor's keywords and defaults


def stage(fn: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """Wrap a script's main: a LengthpredError becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(cfg: DictConfig) -> Any:
        try:
            return fn(cfg)
        except LengthpredError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper
