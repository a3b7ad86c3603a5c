"""Typed names (lengthpred/names.py): one formatter and one parser per name kind, and the parser accepts
every name the stages write."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from lengthpred.errors import ConfigError, DataError
from lengthpred.features import FeatureSettings
from lengthpred.names import (
    POOLED_DOMAIN,
    SELECTED_RLS,
    FeatureKey,
    SplitName,
    forgetting_of,
    hidden_name,
    is_rls,
    mean_oracle_name,
    pair_name,
    rls_name,
)


@pytest.mark.parametrize("name", ["hs.L0.last", "hs.L20.mean", "hs.L2.fused_mix0.5", "hs.L31.fused_prod"])
def test_feature_key_round_trip(name):
    key = FeatureKey.parse(name)
    assert str(key) == key.name == name and FeatureKey(key.layer, key.pool) == key
    assert FeatureKey.is_key(name)


def test_feature_key_fields():
    assert FeatureKey.parse("hs.L2.fused_mix0.5") == FeatureKey(2, "fused_mix0.5")
    assert str(FeatureKey(20, "last")) == "hs.L20.last" and hidden_name(20) == "hs.L20"


@pytest.mark.parametrize("name", ["n_prompt_tokens", "entropy.mean", "hs.L20", "hs.L.last", "hs.Lx.last",
                                  "hs.L2.", "L20.last", "hs.L-1.last", ""])
def test_bad_feature_names_are_rejected_in_one_line(name):
    with pytest.raises(ConfigError, match=r"not of the form hs\.L<layer>\.<pooling>") as e:
        FeatureKey.parse(name)
    assert "\n" not in str(e.value) and repr(name) in str(e.value)


def test_scalar_columns_are_not_feature_keys():
    assert not FeatureKey.is_key("n_prompt_tokens") and not FeatureKey.is_key("entropy.mean")


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("indomain/math/test", ("indomain", "math", "test")),
        ("indomain/all/val", ("indomain", POOLED_DOMAIN, "val")),
        ("cross/chat->math/test", ("cross", "chat->math", "test")),
        ("cross/mix->code/stream_val", ("cross", "mix->code", "stream_val")),
        ("forelen/longseq", ("forelen", "longseq", "")),
    ],
)
def test_split_name_round_trip(name, fields):
    s = SplitName.parse(name)
    assert (s.kind, s.name, s.part) == fields and str(s) == name and SplitName.try_parse(name) == s


def test_split_name_builders():
    assert str(SplitName.indomain("qa", "train")) == "indomain/qa/train"
    assert str(SplitName.cross(pair_name("chat", "math"), "stream")) == "cross/chat->math/stream"
    s = SplitName.parse("cross/mix->math/test")
    assert (s.source, s.target) == ("mix", "math")
    assert str(SplitName.forelen("rl")) == "forelen/rl"
    assert SplitName.prefix("cross") == "cross/"


@pytest.mark.parametrize("name", ["test", "all", "indomain/math", "indomain//test", "cross/chat/test",
                                  "cross/->math/test", "forelen/rl/test", "other/a/b", "indomain/a/b/c", ""])
def test_bad_split_names_are_rejected_in_one_line(name):
    assert SplitName.try_parse(name) is None
    with pytest.raises(DataError, match="is not of the form indomain/<domain>/<part>") as e:
        SplitName.parse(name)
    assert "\n" not in str(e.value)


# -- every name the code produces parses -------------------------------------------------------------
def test_the_feature_names_the_stages_write_parse():
    from lengthpred.features.extract import iter_columns
    from lengthpred.stages.heads import feature_name

    s = FeatureSettings()
    names = [str(FeatureKey(layer, p)) for layer in (0, 2, 20) for p in s.pool_names]
    assert iter_columns([*names, "n_prompt_tokens", "entropy.mean"]) == [(k.layer, k.pool) for k in
                                                                          map(FeatureKey.parse, names)]
    assert feature_name(OmegaConf.create({"layer": 20, "pooling": "last"})) == "hs.L20.last"
    assert feature_name(OmegaConf.create({"layer": None, "pooling": None})) is None


def test_the_split_names_the_stages_write_parse():
    from lengthpred.eval.report import add_pooled_indomain
    from lengthpred.eval.results import Provenance, shift_rows
    from lengthpred.heads.assemble import MIN_SUBSET, forelen_ids, per_domain_split_names
    from lengthpred.heads.base import HeadInput, LabeledSet
    from lengthpred.heads.cross import split_name
    from lengthpred.online.pairs import pair_stream
    from lengthpred.sched.sweep.sources import POOLED_TEST
    from lengthpred.targets import target_frame as as_target_frame

    ids = [f"p{i}" for i in range(MIN_SUBSET + 6)]
    data = LabeledSet(HeadInput(ids=ids[:2], domains=["chat", "math"]), np.ones(2))
    names = per_domain_split_names(data, "test")
    names += list(forelen_ids({"forelen": {"rl": ids}}, exclude=set()))
    pair = {"name": pair_name("chat", "math"), "source": "chat", "target": "math", "train": ids[:6],
            "test": ids[6:12], "shift": {"length_wasserstein": 1.0}}
    names += [split_name(pair, part) for part in ("test", "val")]
    prov = Provenance("e", "m", "d", "h")
    names += list(shift_rows({"cross": [pair]}, prov)["split"])
    df = pd.DataFrame({"head": "h", "split": ["indomain/chat/test", "indomain/math/test"], "id": ["a", "b"]})
    names += list(add_pooled_indomain(df)["split"])
    indomain = {"math": {"train": ids[12:18], "val": ids[18:24], "test": ids[6:12]}}
    targets = as_target_frame({i: 10.0 + k for k, i in enumerate(ids)})
    ps = pair_stream(pair, indomain, lambda xs: np.ones((len(xs), 3)), targets)
    names += [ps.split_test, ps.split_stream, ps.split_val]
    parsed = [SplitName.parse(n) for n in names]
    assert {p.kind for p in parsed} == {"indomain", "cross", "forelen"}
    assert "indomain/all/test" in names and "cross/chat->math/stream_val" in names
    assert [str(p) for p in parsed] == names
    assert SplitName.parse(POOLED_TEST) == SplitName.indomain("*", "test")  # a glob over the domains


def test_rls_names_round_trip_and_anything_else_is_refused():
    for lam in (1.0, 0.999, 0.99, 0.95):
        assert forgetting_of(rls_name(lam)) == lam and is_rls(rls_name(lam))
    assert rls_name(1.0) == "rls@1" and mean_oracle_name(0.99) == "rls@0.99+mean"
    for other in (SELECTED_RLS, mean_oracle_name(1.0), "static", "rls@", "rls@nan", "xrls@1"):
        assert not is_rls(other)
        with pytest.raises(ConfigError, match="is not an rls@<λ> head"):
            forgetting_of(other)
