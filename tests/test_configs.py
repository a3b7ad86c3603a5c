"""Every option of every config group composes with the root config and builds what it names.

Configs mirror constructors (issue 18): a head is `hydra.utils.instantiate(head.params)` and keeps no key
its class ignores; settings groups (features, generate, costs, online, serve, sched) build their settings
objects; every `_target_` instantiates.
"""

from __future__ import annotations

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lengthpred.paths import REPO_ROOT
from tests.conftest import compose_cfg

CONF = REPO_ROOT / "conf"
SKIP_GROUPS = {"hydra"}  # Hydra's own group: composed with every run, not an option of ours
# keys a head config may hold besides `params` (the constructor's keywords), by what the head reads
HEAD_KEYS = {"params", "select", "search", "n_seeds"}
FEATURE_KEYS = {"layer", "layers", "pooling"}  # layers: the concat head's columns


def options() -> list[tuple[str, str]]:
    """(group, option) for every yaml under conf/<group>/ (nested groups as `online/completion`)."""
    out = []
    for path in sorted(CONF.rglob("*.yaml")):
        rel = path.relative_to(CONF)
        if len(rel.parts) < 2 or rel.parts[0] in SKIP_GROUPS:
            continue
        out.append(("/".join(rel.parts[:-1]), rel.stem))
    return out


OVERRIDES = {("model", "local"): ["model.path=/nonexistent/ckpt"]}


@pytest.mark.parametrize("group, option", options(), ids=lambda v: str(v))
def test_every_option_composes_with_the_root_config_and_builds(group, option, tmp_path):
    from lengthpred.costs import CostSettings
    from lengthpred.generate import GenerationSettings
    from lengthpred.heads.sweep import grid
    from lengthpred.online.experiment import AdaptSettings
    from lengthpred.sched.sweep.experiment import parse_policies
    from lengthpred.stages import adapt, serve
    from lengthpred.stages.features import feature_settings

    cfg = compose_cfg([f"{group}={option}", *OVERRIDES.get((group, option), [])], tmp_path)
    OmegaConf.to_container(cfg, resolve=False)  # every node is well-formed
    for key in ("model", "data", "features", "generate", "online", "costs", "eval", "pipeline", "sweep"):
        OmegaConf.to_container(cfg[key], resolve=True, throw_on_missing=False)  # every interpolation resolves
    instantiate(cfg.model)
    feature_settings(cfg)
    GenerationSettings.from_cfg(cfg.generate)
    CostSettings.from_cfg({k: v for k, v in cfg.costs.items() if k != "seed"} | {"seed": int(cfg.costs.seed)})
    assert "static" in adapt.build_heads(cfg.online, 1.0)
    adapt.build_completion(cfg.online)
    AdaptSettings.from_mapping(OmegaConf.to_container(cfg.online, resolve=True), seed=int(cfg.seed))
    if cfg.serve.arrival != "trace":
        serve.settings_from_cfg(cfg)
    parse_policies(OmegaConf.to_container(cfg.sched.policies, resolve=True))
    grid(list(cfg.sweep.heads), list(cfg.sweep.layers), list(cfg.sweep.poolings))
    _check_head(cfg.head)


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "head").glob("*.yaml")))
def test_every_head_is_instantiated_from_its_target_and_keeps_no_ignored_key(name, tmp_path):
    cfg = compose_cfg([f"head={name}"], tmp_path)
    head = _check_head(cfg.head)
    assert head.name == name  # the file is named after the head; the class names it (no `name:` key)


def _check_head(hcfg):
    from lengthpred.heads.training import _candidates
    from lengthpred.stages.heads import build, head_class

    klass = head_class(hcfg)
    head = build(hcfg)
    assert type(head) is klass
    keywords = set(head.get_params())
    allowed = HEAD_KEYS | (FEATURE_KEYS if klass.input_kind in ("features", "tokens") else set())
    assert set(hcfg) <= allowed, f"{klass.name}: keys its training ignores: {sorted(set(hcfg) - allowed)}"
    assert set(hcfg.params) - {"_target_"} <= keywords
    select = OmegaConf.to_container(hcfg.select, resolve=True) if "select" in hcfg else {}
    assert set(select) <= keywords
    if int(hcfg.get("n_seeds") or 1) > 1:
        assert "random_state" in keywords
    for cand in _candidates(select):
        head.set_params(**cand)
        if hasattr(head, "_parameter_constraints"):
            head._validate_params()  # every candidate is a valid value, before any fit
    return head


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "head").glob("*.yaml")))
def test_head_files_start_from_the_constructor_and_repeat_none_of_its_defaults(name):
    """Defaults live in the constructor (`head_params/<name>`); a head file sets only what it changes."""
    from lengthpred.heads import HEADS
    from lengthpred.stages.heads import PARAMS_GROUP, constructor_params

    raw = OmegaConf.load(CONF / "head" / f"{name}.yaml")
    assert {f"/{PARAMS_GROUP}@params": name} in OmegaConf.to_container(raw.defaults)
    assert "name" not in raw and "_target_" not in (raw.get("params") or {})
    defaults = constructor_params(HEADS.get(name))
    for key, value in (OmegaConf.to_container(raw.params) if "params" in raw else {}).items():
        assert key in defaults, f"{name}: {key} is not a constructor keyword"
        assert value != defaults[key], f"{name}: params.{key}={value!r} repeats the constructor's default"
