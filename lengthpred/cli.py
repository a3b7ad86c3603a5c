"""Glue for the thin Hydra entry points in `scripts/`: resolvers, one-line errors, shard parsing."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import ConfigError, LengthpredError
from lengthpred.paths import REPO_ROOT, default_datasets_root

log = logging.getLogger("lengthpred")


def register_resolvers() -> None:
    """`${lp.repo:}` and `${lp.datasets_root:}` so configs work from any working directory."""
    if not OmegaConf.has_resolver("lp.repo"):
        OmegaConf.register_new_resolver("lp.repo", lambda: str(REPO_ROOT))
    if not OmegaConf.has_resolver("lp.datasets_root"):
        OmegaConf.register_new_resolver("lp.datasets_root", lambda: str(default_datasets_root()))


register_resolvers()


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


def parse_shard(shard: str | None) -> tuple[int, int]:
    """`"i/n"` → (i, n) with 0 ≤ i < n; None or "" → (0, 1)."""
    if shard in (None, ""):
        return 0, 1
    try:
        i_s, n_s = str(shard).split("/")
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ConfigError(f"shard={shard!r} is not of the form i/n (e.g. shard=0/4)") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"shard={shard!r}: need 0 <= i < n")
    return i, n
