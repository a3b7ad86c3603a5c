"""The adapt stage (`scripts/adapt.py`): every cross-domain pair of a config as a stream
(`lengthpred.online.experiment`), with the heads and completion model its `online` group builds.

Each pair's chosen RLS head, as it stands after the stream (fitted on the source, adapted on the target's
completed requests), is written as a readout file `vllm serve` loads (`readouts/<source>__<target>.safetensors`,
the format of `lengthpred.online.readout_file`), when the stream reads a servable feature (one layer's
last-token state); otherwise the reason is logged.

`online.blas_threads` caps BLAS threads for the stage (threadpoolctl): threaded level-2 BLAS at d≈576 spins
badly on a busy small machine (measured here: a 577×577 Cholesky took seconds).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from threadpoolctl import threadpool_limits

from lengthpred.data import load_prompts, load_splits
from lengthpred.errors import ConfigError
from lengthpred.names import PAIR_SEP, FeatureKey, mean_oracle_name, rls_name
from lengthpred.online import experiment
from lengthpred.online.readout_file import write_readout
from lengthpred.online.rls import RLSRegressor
from lengthpred.online.stream import HeadSpec
from lengthpred.stages.features import ensure_features
from lengthpred.stages.readout_export import model_identity
from lengthpred.stages.targets import load_targets
from lengthpred.stages.tracking import tracked
from lengthpred.targets import target_frame

log = logging.getLogger("lengthpred.adapt")


def build_heads(ocfg: Mapping[str, Any], alpha: float) -> dict[str, HeadSpec]:
    """One `rls@λ` head per forgetting value, the mean-label oracle `rls@λ+mean` (`mean_oracle`: its λ,
    null: none) and every configured baseline, all with the same alpha."""
    cfg = _plain(ocfg)
    lams = cfg["forgetting"] or []
    if not isinstance(lams, list | tuple):
        lams = [lams]
    heads: dict[str, HeadSpec] = {}
    for lam in lams:
        est = RLSRegressor(alpha, forgetting=lam, trace_cap=cfg["trace_cap"])
        est._validate_params()  # λ outside (0, 1] fails here, before any data is read
        heads[rls_name(lam)] = HeadSpec(est)
    if cfg["mean_oracle"] is not None:
        lam = cfg["mean_oracle"]
        est = RLSRegressor(alpha, forgetting=lam, trace_cap=cfg["trace_cap"])
        est._validate_params()
        heads[mean_oracle_name(lam)] = HeadSpec(est, label="mean")
    for name, spec in (cfg["baselines"] or {}).items():
        if spec is None:  # `online.baselines.window=null` drops a baseline
            continue
        spec = dict(spec)
        if "estimator" not in spec:
            raise ConfigError(f"online.baselines.{name} needs an `estimator` with a _target_")
        est = instantiate({**spec["estimator"], "alpha": alpha})
        heads[name] = HeadSpec(est, **{k: spec[k] for k in ("fit_on", "update") if k in spec})  # else HeadSpec's
    if not heads:
        raise ConfigError("online: no heads (set online.forgetting or online.baselines)")
    return heads


def build_completion(ocfg: Mapping[str, Any]) -> Any:
    comp = instantiate(ocfg["completion"])
    if not hasattr(comp, "schedule"):
        raise ConfigError("online.completion must build an object with schedule(lengths) -> (arrival, done)")
    return comp


def _plain(ocfg: Any) -> dict[str, Any]:
    return OmegaConf.to_container(ocfg, resolve=True) if OmegaConf.is_config(ocfg) else dict(ocfg)


def load_inputs(cfg: Any) -> tuple[dict, Any, Any]:
    """(splits, feature set, targets with each prompt's domain) of a config."""
    prompts = load_prompts(cfg.data)
    splits = load_splits(cfg.data)
    targets = target_frame(load_targets(cfg))
    if "domain" not in targets.columns:
        dom = dict(zip(prompts["id"], prompts["domain"], strict=True))
        targets["domain"] = [dom.get(i, "") for i in targets.index]
    return splits, ensure_features(cfg, prompts), targets


def run_adaptation(cfg: Any, out_dir: str | Path, *, splits: Mapping[str, Any] | None = None,
                   feature_set: Any = None, targets: Any = None, tracker: Any = None) -> dict[str, Any]:
    """Run the online stage; inputs (splits, feature_set, targets) default to the config's stages. Every
    config error (λ, baselines, completion, a served readout's layer) is raised before any input is loaded."""
    ocfg = cfg.online
    if "static" not in build_heads(ocfg, 1.0):  # validates λ and baselines before any work
        raise ConfigError("online.baselines.static is the reference of every difference: keep it")
    build_completion(ocfg)
    settings = experiment.AdaptSettings.from_mapping(_plain(ocfg), seed=int(cfg.seed))
    if not settings.forgetting:
        raise ConfigError("online.forgetting: at least one λ (the candidates chosen on validation)")
    export = readout_exporter(cfg, settings.feature, out_dir) if ocfg.export_readouts else None
    limit = nullcontext() if ocfg.blas_threads is None else threadpool_limits(int(ocfg.blas_threads), "blas")
    with limit:
        if splits is None or feature_set is None or targets is None:
            splits, feature_set, targets = load_inputs(cfg)
        return experiment.run_adaptation(
            settings, out_dir, splits=splits, feature_set=feature_set, targets=targets,
            make_heads=lambda alpha: build_heads(ocfg, alpha), completion=build_completion(ocfg),
            config=_plain(ocfg), tracker=tracker, export=export,
        )


def readout_exporter(cfg: Any, feature: str, out_dir: str | Path) -> Callable[[str, Any], Path | None] | None:
    """`export(pair, estimator)` writing each pair's adapted readout under `out_dir/readouts/`; None (the
    reason logged) when the stream's feature cannot be served."""
    key = FeatureKey.parse(feature)
    if key.pool != "last":
        log.info("no adapted readout files: the stream reads %s; the server reads the last prompt token's state",
                 feature)
        return None
    identity = model_identity(cfg.model)
    if not 1 <= int(key.layer) < identity.num_hidden_layers:  # before any stream, not after the first pair's
        raise ConfigError(f"online.feature={feature}: a served readout reads after a decoder layer, "
                          f"1..{identity.num_hidden_layers - 1} for {identity.name} (or online.export_readouts=false)")
    folder = Path(out_dir) / "readouts"

    def export(pair: str, estimator: Any) -> Path | None:
        if not isinstance(estimator, RLSRegressor) or estimator._M is None:
            return None
        name = pair.replace(PAIR_SEP, "__")
        return write_readout(folder / f"{name}.safetensors", estimator, identity, layer=int(key.layer),
                             source=f"scripts/adapt.py ({feature}, {cfg.data.name}, pair {pair}: the chosen "
                                    f"forgetting's RLS after the stream)")

    return export


def run_adapt(cfg: DictConfig, out: str | Path) -> Path:
    """The adapt stage (scripts/adapt.py): every cross-domain pair streamed through RLS and its baselines into
    `out`, logged to W&B. Returns the folder."""
    with tracked(cfg, "adapt") as tracker:
        res = run_adaptation(cfg, out, tracker=tracker)
    logging.getLogger("lengthpred.adapt").info("adapt: %s", res)
    return Path(out)
