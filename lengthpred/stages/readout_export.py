"""The train stage's readout file (`readout.safetensors` beside the saved `linear` head): what a user carries to
`vllm serve` (lengthpred.vllm_plugin; the format is `lengthpred.online.readout_file`).

The linear head (standardised features → ridge on log1p length) is continued as LEAP's RLS readout from its own
training rows (`RLSRegressor.from_linear_head`: the same weights, P from the rows it was fitted on), so the server
starts from the head T1 scores and keeps adapting it. Only a head that reads one layer's last-token state can be
served; any other is skipped with the reason logged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from lengthpred.errors import ConfigError
from lengthpred.names import FeatureKey
from lengthpred.online.readout_file import ModelIdentity, weights_fingerprint, write_readout
from lengthpred.online.rls import RLSRegressor

log = logging.getLogger("lengthpred.readout")

READOUT_FILE = "readout.safetensors"


def model_identity(model_cfg: Any) -> ModelIdentity:
    """The identity a readout records: the served checkpoint's architecture, hidden size, layer count and weights
    fingerprint (the tiny test model: its built-in config, no fingerprint)."""
    from hydra.utils import instantiate

    from lengthpred.models.checkpoint import checkpoint_dir

    spec = instantiate(model_cfg)
    if spec.tiny:
        from lengthpred.models.tiny import TINY_HIDDEN, TINY_LAYERS

        return ModelIdentity(spec.name, "LlamaForCausalLM", TINY_HIDDEN, TINY_LAYERS)
    ckpt = checkpoint_dir(spec)
    config_path = Path(ckpt) / "config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text())
    else:  # a hub id: its config through transformers' cache
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(ckpt).to_dict()
    config = config.get("text_config", config)
    archs = config.get("architectures") or [""]
    return ModelIdentity(spec.name, str(archs[0]), int(config["hidden_size"]), int(config["num_hidden_layers"]),
                         weights_fingerprint(ckpt))


def servable_reason(head: Any, feature: Any) -> str | None:
    """Why a fitted head cannot be exported as a served readout (None: it can)."""
    if getattr(head, "name", "") != "linear":
        return f"head {getattr(head, 'name', '?')!r} is not the linear readout"
    if not isinstance(feature, str):
        return "it reads several features side by side"
    if FeatureKey.parse(feature).pool != "last":
        return f"it reads {feature}; the server reads the last prompt token's state (pooling last)"
    if getattr(head, "target", "log1p") != "log1p" or getattr(head, "log_features", False):
        return "only target log1p without log_features continues as RLS"
    return None


def export_readout(cfg: DictConfig, head: Any, feature: Any, X_train: np.ndarray, out_dir: str | Path
                   ) -> Path | None:
    """Write `out_dir/readout.safetensors` for a servable head; None (with the reason logged) otherwise."""
    why = servable_reason(head, feature)
    if why is not None:
        log.info("no readout file: %s", why)
        return None
    key = FeatureKey.parse(feature)
    identity = model_identity(cfg.model)
    if identity.hidden_size != X_train.shape[1]:
        raise ConfigError(f"{feature} has {X_train.shape[1]} values per prompt, the model's hidden size is "
                          f"{identity.hidden_size}")
    est = RLSRegressor.from_linear_head(head, X_train)
    out = write_readout(Path(out_dir) / READOUT_FILE, est, identity, layer=int(key.layer), pooling="last",
                        source=f"scripts/train.py head=linear ({feature}, {cfg.data.name}, {len(X_train)} train prompts)")
    log.info("readout for vllm serve: %s (layer %d, %s)", out, key.layer, identity.name)
    return out
