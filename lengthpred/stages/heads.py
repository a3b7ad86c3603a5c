"""Head configs (`conf/head/<name>.yaml`): the class from `params._target_`, what the head reads, the file.

A head config is `params` (`_target_` + the constructor's keywords; `hydra.utils.instantiate(head.params)`
builds the head), `select` (constructor keywords → candidates chosen on val), `n_seeds`, and for heads that
read prefill states `layer` and `pooling`. The head's name is its class's registry name (`HEADS`).

Defaults live in one place, the constructor: `register_head_params` stores, for every registered head, a
`head_params/<name>` config node holding `_target_` and every constructor keyword with its default, and
each head file starts from it (`defaults: [/head_params@params: <name>, _self_]`), setting only what it
changes. So every keyword is in the composed config (`head.params.epochs=1` overrides it), none is repeated,
and none is one the class ignores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from lengthpred.errors import ConfigError, DataError
from lengthpred.features.settings import FeatureSettings
from lengthpred.heads.base import HEADS, BaseHead
from lengthpred.heads.settings import HeadSettings
from lengthpred.names import FeatureKey
from lengthpred.paths import CONF_DIR

HEAD_DIR = CONF_DIR / "head"
PARAMS_GROUP = "head_params"  # a config group in Hydra's ConfigStore, one option per registered head


def constructor_params(klass: type[BaseHead]) -> dict[str, Any]:
    """`_target_` and every constructor keyword of a head class with its default (tuples as lists)."""
    defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in klass().get_params().items()}
    return {"_target_": f"lengthpred.heads.{klass.__name__}", **defaults}


def register_head_params() -> None:
    """Store `head_params/<name>` for every head (`lengthpred.cli` does it before any config is composed)."""
    cs = ConfigStore.instance()
    for name in HEADS.names():
        cs.store(group=PARAMS_GROUP, name=name, node=constructor_params(HEADS.get(name)))


def head_class(hcfg: Mapping[str, Any]) -> type[BaseHead]:
    """The registered head class `params._target_` names."""
    target = (hcfg.get("params") or {}).get("_target_")
    if not target:
        raise ConfigError(f"a head config needs params._target_ (one of the classes of {HEADS.names()})")
    klass = get_class(str(target))
    if not (isinstance(klass, type) and issubclass(klass, BaseHead)) or klass.name not in HEADS:
        raise ConfigError(f"head params._target_={target!r} is not a registered head; valid: {HEADS.names()}")
    return klass


def head_name(hcfg: Mapping[str, Any]) -> str:
    """The registry name of a head config's class (`linear`, `proxy_reg`, …)."""
    return head_class(hcfg).name


def build(hcfg: Mapping[str, Any]) -> BaseHead:
    """A fresh head from `params` (`hydra.utils.instantiate`); an unknown keyword is a ConfigError."""
    klass = head_class(hcfg)
    params = dict(OmegaConf.to_container(hcfg["params"], resolve=True) if OmegaConf.is_config(hcfg["params"])
                  else hcfg["params"])
    valid = set(klass().get_params())
    unknown = sorted(set(params) - valid - {"_target_"})
    if unknown:
        raise ConfigError(f"head {klass.name!r} takes no {unknown}; valid keys: {sorted(valid)}")
    return instantiate(params)


def plain(hcfg: Any) -> dict[str, Any]:
    """The resolved head config as a plain dict (what `lengthpred.heads.run_training` takes)."""
    return OmegaConf.to_container(hcfg, resolve=True) if OmegaConf.is_config(hcfg) else dict(hcfg)


def feature_name(hcfg: Mapping[str, Any]) -> str | None:
    """`hs.L{layer}.{pooling}` of a head config, or None for heads that read no hidden state."""
    if hcfg.get("layer") is None or hcfg.get("pooling") is None:
        return None
    return str(FeatureKey(int(hcfg["layer"]), str(hcfg["pooling"])))


def feature_names(hcfg: Mapping[str, Any]) -> list[str]:
    """The columns a features head reads, in the order its X holds them: with `layers` (the concat head),
    `hs.L<l>.<p>` for each layer and, within a layer, each of `pooling` (one name or a list); else
    `feature_name` alone ([] for a head that reads no hidden state)."""
    if hcfg.get("layers") is None:
        name = feature_name(hcfg)
        return [] if name is None else [name]
    pools = hcfg.get("pooling") or "last"
    pools = [pools] if isinstance(pools, str) else list(pools)
    return [str(FeatureKey(int(layer), str(p))) for layer in hcfg["layers"] for p in pools]


def feature_needs(hcfg: Mapping[str, Any]) -> list[tuple[int | None, str | None]]:
    """Every (layer, pooling) a head config reads (`feature_need`, one per column for a `layers` config)."""
    if hcfg.get("layers") is not None and head_class(hcfg).input_kind == "features":
        return [(k.layer, k.pool) for k in map(FeatureKey.parse, feature_names(hcfg))]
    return [feature_need(hcfg)]


def feature_need(hcfg: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """The (layer, pooling) a head config reads from a feature store (`FeatureSettings.only`):
    (layer, "learned") for token-level heads, (None, None) for the scalar columns alone."""
    kind = head_class(hcfg).input_kind
    if kind == "tokens":
        return int(hcfg["layer"]), "learned"
    if kind == "features":
        return int(hcfg["layer"]), str(hcfg["pooling"])
    return None, None


def check_features_config(settings: FeatureSettings, feature: str | None, token_layer: int | None,
                          pooling: str | None) -> None:
    """Refuse, before any extraction or training, a head that asks for what the features config omits."""
    if feature is not None and pooling not in settings.pool_names:
        raise DataError(
            f"head.pooling={pooling!r} is not extracted by this features config; pools: {settings.pool_names}"
        )
    if token_layer is not None:
        if token_layer not in settings.token_layers:
            raise DataError(
                f"this head reads token-level states of layer {token_layer}, but features.token_layers="
                f"{list(settings.token_layers)}; add it (e.g. features.token_layers=[{token_layer}])"
            )
        if not (settings.needs_entropy and settings.needs_attention):
            raise DataError("a learned fusion needs token entropy and attention: keep features.fused non-empty")


def head_file(name: str) -> dict[str, Any]:
    """`conf/head/<name>.yaml` over its `head_params` defaults, unresolved (as `head=<name>` composes it)."""
    path = HEAD_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"no head config {name!r}; valid: {sorted(p.stem for p in HEAD_DIR.glob('*.yaml'))}")
    own = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    base = {}
    for entry in own.pop("defaults", []):
        if isinstance(entry, Mapping) and f"/{PARAMS_GROUP}@params" in entry:
            base = {"params": constructor_params(HEADS.get(str(entry[f"/{PARAMS_GROUP}@params"])))}
    return OmegaConf.to_container(OmegaConf.merge(base, own), resolve=False)


def head_config(cfg: Any, name: str) -> dict[str, Any]:
    """`conf/head/<name>.yaml` as `head=<name>` composes it, resolved against the root config (for `${seed}`,
    `${features.fuse_on}`)."""
    root = OmegaConf.to_container(cfg, resolve=False)  # a plain copy: the struct flag would refuse new keys
    root["head"] = head_file(name)
    return OmegaConf.to_container(OmegaConf.create(root).head, resolve=True)


def head_settings(cfg: Any, name: str) -> HeadSettings:
    """`head_config(cfg, name)` as the `HeadSettings` the fitting code reads."""
    return HeadSettings.from_mapping(head_config(cfg, name), group=f"head {name}")
