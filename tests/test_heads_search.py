"""One selection protocol for every learned head (issue 25 item 1): the same random-search budget drawn
from each head's declared space, a train subsample for the search with a refit on all train, every
candidate's val score stored, and early stopping that makes `epochs` a maximum."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.stats import spearmanr

from lengthpred.errors import ConfigError
from lengthpred.heads import EGTPHead, ESTPLearnedHead, HeadSettings, ProbeHead, run_training
from lengthpred.heads.search import SearchSettings, sample_candidates, space_size, subset
from lengthpred.paths import REPO_ROOT
from tests.test_heads_fusion import keyed
from tests.test_heads_training import make_set

ALPHAS = [0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5]
LINEAR = {"select": {"alpha": ALPHAS}, "search": {"budget": 4, "seed": 0}}


def test_candidates_are_a_seeded_sample_of_the_space_without_repeats():
    space = {"lr": [1e-4, 1e-3, 1e-2], "binning": ["quantile", "uniform"], "epochs": 10}
    a = sample_candidates("probe", space, SearchSettings(budget=5, seed=3))
    assert len(a) == 5 and len({tuple(sorted(c.items())) for c in a}) == 5
    assert all(c["epochs"] == 10 and c["lr"] in space["lr"] for c in a)
    assert a == sample_candidates("probe", space, SearchSettings(budget=5, seed=3))
    assert len(sample_candidates("probe", space, SearchSettings(budget=6, seed=0))) == 6  # the whole grid
    assert sample_candidates("probe", {}, SearchSettings()) == [{}]  # no space: no search


def test_a_space_smaller_than_the_budget_is_a_config_error_naming_the_head():
    with pytest.raises(ConfigError, match=r"head 'egtp'.*2 combinations.*budget=8"):
        sample_candidates("egtp", {"binning": ["quantile", "uniform"]}, SearchSettings(budget=8))
    with pytest.raises(ConfigError, match="search takes no"):
        SearchSettings.from_cfg({"budget": 8, "n_iter": 3})


def test_run_training_draws_the_budget_and_stores_every_candidates_val_score():
    train, val, test = make_set(60, 0), make_set(20, 1), make_set(20, 2)
    head, m, _ = run_training("linear", HeadSettings.from_mapping(LINEAR), train, val, test)
    assert m["n_candidates"] == 4 and len(m["candidates"]) == 4
    assert {c["params"]["alpha"] for c in m["candidates"]} <= set(ALPHAS)
    best = max(m["candidates"], key=lambda c: c["val_spearman"])
    assert m["selected"] == best["params"] and m["val_spearman"] == best["val_spearman"]
    assert all(c["fit_seconds"] >= 0 for c in m["candidates"])
    s = m["search"]
    assert (s["protocol"], s["budget"], s["space_size"], s["refit_on_all_train"]) == ("random", 4, 8, False)
    # without a search node: the full grid, as before
    _, g, _ = run_training("linear", HeadSettings(select={"alpha": ALPHAS}), train, val, test)
    assert g["n_candidates"] == 8 and g["search"]["protocol"] == "grid"


def test_candidates_are_recorded_per_seed():
    cfg = {
        "select": {"lr": [1e-3, 3e-3], "binning": ["quantile", "uniform"]},
        "search": {"budget": 3, "seed": 0},
        "params": {"hidden": 8, "epochs": 2, "random_state": 4},
    }
    _, m, _ = run_training("probe", HeadSettings.from_mapping(cfg), make_set(60, 0), make_set(20, 1), make_set(20, 2), n_seeds=2)
    assert [c["random_state"] for c in m["candidates"]] == [4, 4, 4, 5, 5, 5]


def test_search_on_a_subsample_refits_the_chosen_candidate_on_all_train():
    train, val, test = make_set(80, 0), make_set(20, 1), make_set(20, 2)
    cfg = LINEAR | {"search": {"budget": 4, "seed": 0, "subsample": 30}}
    head, m, _ = run_training("linear", HeadSettings.from_mapping(cfg), train, val, test)
    assert m["search"]["n_search_train"] == 30 and m["search"]["refit_on_all_train"]
    full = run_training("linear", HeadSettings(params=m["selected"]), train, None, test)[0]
    np.testing.assert_allclose(head.predict(test.inputs.features), full.predict(test.inputs.features))
    sub = subset(train, [0, 5, 7])
    assert sub.inputs.ids == [train.inputs.ids[i] for i in (0, 5, 7)] and len(sub.y) == 3


@pytest.mark.parametrize("klass", [EGTPHead, ProbeHead])
def test_early_stopping_holds_out_train_rows_stops_and_restores_the_best_epoch(klass):
    s = make_set(120, 0)
    X, y = s.inputs.features, s.y
    head = klass(hidden=8, lr=3e-3, epochs=300, early_stopping=True, n_iter_no_change=3).fit(X, y)
    assert head.n_epochs_ < 300 and len(head.validation_scores_) == head.n_epochs_
    assert head.validation_scores_[head.best_epoch_ - 1] == max(head.validation_scores_)
    # the restored weights are the best epoch's: the held-out Spearman is its score
    _, held = head._held_out_rows(len(X))
    rho = spearmanr(y[held], head.predict(X[held])).statistic
    assert rho == pytest.approx(max(head.validation_scores_), abs=1e-9)
    # the default trains every epoch on every row, as before
    plain = klass(hidden=8, epochs=4).fit(X, y)
    assert plain.n_epochs_ == 4 and not hasattr(plain, "best_epoch_")


def test_learned_fusion_head_stops_early_too():
    X, y = keyed(0, "entropy", n=60)
    head = ESTPLearnedHead(hidden=8, lr=3e-3, epochs=100, early_stopping=True, n_iter_no_change=2).fit(X, y)
    assert head.n_epochs_ < 100 and head.best_epoch_ >= 1
    np.testing.assert_array_equal(head.x_mean_, head.module_.x_mean.numpy())  # restored with the weights


HEAD_DIR = REPO_ROOT / "conf" / "head"
NO_SEARCH = {"constant", "prompt_len", "domain_median"}


@pytest.mark.parametrize("name", sorted(p.stem for p in HEAD_DIR.glob("*.yaml")))
def test_every_learned_head_declares_a_space_at_least_the_default_budget(name):
    raw = OmegaConf.load(HEAD_DIR / f"{name}.yaml")
    budget = OmegaConf.load(REPO_ROOT / "conf" / "search" / "default.yaml").budget
    if name in NO_SEARCH:
        assert "select" not in raw and "search" not in raw
        return
    assert OmegaConf.to_container(raw, resolve=False)["search"] == "${search}"
    assert space_size(OmegaConf.to_container(raw.select)) >= budget


def test_config_validation_refuses_a_space_below_the_budget_before_any_work():
    from lengthpred.stages.validate import check_head

    hcfg = {
        "params": {"_target_": "lengthpred.heads.EGTPHead"},
        "select": {"binning": ["quantile", "uniform"]},
        "search": {"budget": 8, "seed": 0, "subsample": None},
    }
    with pytest.raises(ConfigError, match=r"head 'egtp'.*fewer than search.budget=8"):
        check_head(hcfg)
    hcfg["search"]["budget"] = 2
    check_head(hcfg)


def test_cross_pairs_reuse_the_in_domain_choice_unless_told_to_search():
    cfg = {"params": {"alpha": None}, "select": {"alpha": [0.1, 1.0, 10.0]}, "search": {"budget": 2}}
    settings = HeadSettings.from_mapping(cfg)
    reused = settings.for_cross({"alpha": 10.0})
    assert reused.select == {"alpha": [10.0]} and reused.search is None  # one candidate, no budget check
    assert settings.select == {"alpha": [0.1, 1.0, 10.0]}  # the in-domain settings are left as they were
    searched = HeadSettings.from_mapping(cfg | {"search": {"budget": 2, "cross": "search"}}).for_cross({"alpha": 10.0})
    assert searched.select == cfg["select"] and searched.search.cross == "search"
    assert HeadSettings().for_cross(None) == HeadSettings()  # no search node: as before
    with pytest.raises(ConfigError, match="search.cross="):
        HeadSettings.from_mapping(cfg | {"search": {"cross": "never"}})
