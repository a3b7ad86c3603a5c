"""`settings_from` (lengthpred/settings.py): one rule from a config group to a settings dataclass, used by
every library settings class."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from omegaconf import OmegaConf

from lengthpred.costs.measure import CostSettings
from lengthpred.errors import ConfigError
from lengthpred.features import FeatureSettings
from lengthpred.generate.settings import GenerationSettings
from lengthpred.online.experiment import AdaptSettings
from lengthpred.settings import settings_from
from tests.conftest import compose_cfg


@dataclass(frozen=True)
class Toy:
    name: str
    grid: tuple[float, ...] = (1.0,)
    extra: dict | None = None
    seed: int = 0


def test_containers_become_tuples_and_dicts_and_caller_values_win():
    m = OmegaConf.create({"name": "a", "grid": [0.1, 1.0], "extra": {"k": 1}, "_target_": "x", "other": 3})
    t = settings_from(Toy, m, group="toy", skip=("other",), seed=7)
    assert t == Toy("a", (0.1, 1.0), {"k": 1}, 7)
    assert type(t.grid) is tuple and type(t.extra) is dict


def test_unknown_and_missing_keys_name_the_group():
    with pytest.raises(ConfigError, match=r"^toy: unknown keys \['gird'\]; known: \['extra', 'grid', 'name', 'seed'\]"):
        settings_from(Toy, {"name": "a", "gird": [1]}, group="toy")
    with pytest.raises(ConfigError, match=r"^toy: missing keys \['name'\]"):
        settings_from(Toy, None, group="toy")


@pytest.mark.parametrize("cls, build, group", [
    (CostSettings, CostSettings.from_cfg, "costs"),
    (GenerationSettings, GenerationSettings.from_cfg, "generate"),
    (FeatureSettings, FeatureSettings.from_cfg, "features"),
])
def test_every_settings_class_refuses_a_typo(cls, build, group):
    with pytest.raises(ConfigError, match=rf"^{group}: unknown keys \['tpyo'\]"):
        build({"tpyo": 1})


def test_adapt_settings_refuse_a_typo_but_leave_the_stage_keys_to_the_stage():
    online = OmegaConf.to_container(compose_cfg().online, resolve=True)
    s = AdaptSettings.from_mapping(online, seed=3)  # baselines, completion, trace_cap: read by stages.adapt
    assert s.seed == 3 and type(s.forgetting) is tuple and s.pairs is None
    with pytest.raises(ConfigError, match=r"^online: unknown keys \['forgeting'\]"):
        AdaptSettings.from_mapping(online | {"forgeting": [0.9]})
