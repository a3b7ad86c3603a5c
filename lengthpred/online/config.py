"""Heads and completion model of a stream run, built from the `online` config group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from hydra.utils import instantiate
from omegaconf import OmegaConf
from sklearn.linear_model import RidgeCV
from sklearn.preprocessing import StandardScaler

from lengthpred.errors import ConfigError
from lengthpred.online.rls import RLSRegressor
from lengthpred.online.stream import HeadSpec


def rls_name(forgetting: float) -> str:
    """`rls@1`, `rls@0.999`: the head name in curves and predictions files."""
    return f"rls@{float(forgetting):g}"


def mean_oracle_name(forgetting: float) -> str:
    """`rls@1+mean`: RLS updated with the mean of each prompt's samples (an oracle no server has)."""
    return f"{rls_name(forgetting)}+mean"


def select_alpha(X: np.ndarray, y: np.ndarray, alphas: list[float]) -> float:
    """The linear head's choice when alpha is null: RidgeCV (efficient LOO) in standardised log1p space."""
    Xs = StandardScaler().fit_transform(np.asarray(X, dtype=np.float64))
    return float(RidgeCV(alphas=np.asarray(alphas, dtype=np.float64)).fit(Xs, np.log1p(y)).alpha_)


def build_heads(ocfg: Mapping[str, Any], alpha: float) -> dict[str, HeadSpec]:
    """One `rls@λ` head per forgetting value, the mean-label oracle `rls@λ+mean` (`mean_oracle`: its λ,
    null: none) and every configured baseline, all with the same alpha."""
    cfg = OmegaConf.to_container(ocfg, resolve=True) if OmegaConf.is_config(ocfg) else dict(ocfg)
    lams = cfg.get("forgetting") or []
    if not isinstance(lams, list | tuple):
        lams = [lams]
    heads: dict[str, HeadSpec] = {}
    for lam in lams:
        est = RLSRegressor(alpha, forgetting=lam, trace_cap=cfg.get("trace_cap", 10.0))
        est._validate_params()  # λ outside (0, 1] fails here, before any data is read
        heads[rls_name(lam)] = HeadSpec(est)
    if cfg.get("mean_oracle") is not None:
        lam = cfg["mean_oracle"]
        est = RLSRegressor(alpha, forgetting=lam, trace_cap=cfg.get("trace_cap", 10.0))
        est._validate_params()
        heads[mean_oracle_name(lam)] = HeadSpec(est, label="mean")
    for name, spec in (cfg.get("baselines") or {}).items():
        if spec is None:  # `online.baselines.window=null` drops a baseline
            continue
        spec = dict(spec)
        if "estimator" not in spec:
            raise ConfigError(f"online.baselines.{name} needs an `estimator` with a _target_")
        est = instantiate({**spec["estimator"], "alpha": alpha})
        heads[name] = HeadSpec(
            est, fit_on=spec.get("fit_on", "source"), update=bool(spec.get("update", True))
        )
    if not heads:
        raise ConfigError("online: no heads (set online.forgetting or online.baselines)")
    return heads


def build_completion(ocfg: Mapping[str, Any]) -> Any:
    comp = instantiate(ocfg["completion"])
    if not hasattr(comp, "schedule"):
        raise ConfigError("online.completion must build an object with schedule(lengths) -> (arrival, done)")
    return comp
