"""Baselines fitted within each CASTILLO dataset (lengthpred.crossmodel.fits `within`): the sign artefact of a
pooled prompt-length fit is gone, and no per-dataset table shows a pooled-fit baseline.

Synthetic Simpson data: inside dataset A longer prompts get shorter answers, inside B longer ones (or also
shorter), and A's prompts are short with short answers while B's are long with long ones, so the pooled slope
is positive. Prompt length is then a perfect ranker inside each dataset given that dataset's own sign
(Spearman +1), and the pooled fit scores −1 wherever the dataset's slope is the other sign.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.crossmodel.ceilings import POOLED
from lengthpred.crossmodel.fits import HeadSpec, fit_all
from lengthpred.crossmodel.inputs import PromptInputs
from lengthpred.crossmodel.scoring import NOT_IN_DATASET, score_all
from lengthpred.crossmodel.table import ALL_MODELS, LengthTable
from lengthpred.crossmodel.tables import table_t7, table_t7_datasets
from lengthpred.heads import HeadSettings
from lengthpred.heads.search import SearchSettings

M1, M2 = "acme--One", "acme--Two"
N = 40  # prompts per dataset


def simpson(slope_b: float = 1.0):
    """(inputs, table, split, dataset_of): A's within slope −1, B's `slope_b`, the pooled slope positive."""
    rng = np.random.default_rng(0)
    ids, ds, tokens, base = [], [], [], []
    for name, lo, hi, level, slope in (("A", 10, 50, 100.0, -1.0), ("B", 300, 400, 3000.0, slope_b)):
        t = rng.permutation(np.linspace(lo, hi, N))
        ids += [f"{name}{i}" for i in range(N)]
        ds += [name] * N
        tokens += list(t)
        base += list(level * np.exp(slope * 0.5 * (np.log(t) - np.log(t).mean()) / np.log(t).std()))
    base = np.array(base)
    samples = np.stack([np.stack([base * f * rng.lognormal(0, 0.01, 10).reshape(1, -1).repeat(len(base), 0)[:, j]
                                  for j in range(10)], axis=1) for f in (1.0, 1.5)], axis=1)
    table = LengthTable(ids, [M1, M2], samples)
    inputs = PromptInputs(ids, {}, [f"prompt {i}" for i in ids], ds, np.array(tokens))
    parts = {"train": [], "val": [], "test": []}
    for name in ("A", "B"):
        mine = [i for i in ids if i.startswith(name)]
        parts["train"] += mine[:20]
        parts["val"] += mine[20:28]
        parts["test"] += mine[28:]
    return inputs, table, parts, dict(zip(ids, ds, strict=True))


def specs(within: bool = True) -> list[HeadSpec]:
    cfg = HeadSettings()
    targets = (M1, M2, ALL_MODELS)
    out = [HeadSpec("prompt_len", cfg, None, targets, pooled_only=within)]
    return out + ([HeadSpec("prompt_len", cfg, None, targets, within=True)] if within else [])


def spearman(res: pd.DataFrame, head: str, model: str, ds: str) -> float:
    r = res[(res["head"] == head) & (res["fit"] == model) & (res["model"] == model) & (res["dataset"] == ds)
            & (res["metric"] == "spearman")]
    return float(r["value"].item())


def test_pooled_fit_ranks_inside_a_dataset_with_the_pooled_sign():
    # the artefact, as the old run scored it: the pooled (positive) slope decides the sign inside A
    inputs, table, split, ds_of = simpson()
    fits, preds = fit_all(specs(within=False), inputs, table, split, min_train=5)
    res = score_all(preds, fits, table, split["test"], ds_of, n_boot=0, min_test=5)
    assert spearman(res, "prompt_len", M1, POOLED) > 0.5
    assert spearman(res, "prompt_len", M1, "A") == pytest.approx(-1.0)
    assert spearman(res, "prompt_len", M1, "B") == pytest.approx(1.0)


@pytest.mark.parametrize("slope_b", [1.0, -1.0])
def test_within_fit_has_each_datasets_own_sign(slope_b):
    inputs, table, split, ds_of = simpson(slope_b)
    fits, preds = fit_all(specs(), inputs, table, split, min_train=5)
    assert list(fits["head"]) == ["prompt_len (pooled fit)"] * 3 + ["prompt_len (within dataset)"] * 3
    assert (fits["status"] == "fitted").all() and set(fits["n_train"]) == {40}
    res = score_all(preds, fits, table, split["test"], ds_of, n_boot=0, min_test=5)
    for m in (M1, M2):  # each dataset's own slope, whatever its sign: +1 in both
        assert spearman(res, "prompt_len (within dataset)", m, "A") == pytest.approx(1.0)
        assert spearman(res, "prompt_len (within dataset)", m, "B") == pytest.approx(1.0)
    # the pooled fit is scored pooled only: no per-dataset row can carry its arbitrary sign
    pooled_fit = res[res["head"] == "prompt_len (pooled fit)"]
    assert set(pooled_fit["dataset"]) == {POOLED}
    assert spearman(res, "prompt_len (pooled fit)", M1, POOLED) > 0.5
    # the within fit's pooled row scores its per-dataset predictions together (it knows the dataset)
    assert spearman(res, "prompt_len (within dataset)", M1, POOLED) > 0.5
    t = table_t7_datasets(res, fits, {}, [M1, M2], ["A", "B"], "prompt_len (within dataset)", {})
    assert [c.name for c in t.columns][-2:] == ["prompt_len (within dataset) Spearman", "Share"]
    assert "prompt_len (pooled fit)" in {r[1] for r in table_t7(res, fits, {}, [M1, M2]).rows}


def test_a_dataset_too_small_to_fit_is_a_row_that_says_so():
    inputs, table, split, ds_of = simpson()
    split = {k: [i for i in v if not (k == "train" and i.startswith("B") and i != "B0")] for k, v in split.items()}
    fits, preds = fit_all(specs()[1:], inputs, table, split, min_train=5)
    assert fits["status"].iloc[0] == "fitted (not in B: not fitted (1 train < 5))"
    res = score_all(preds, fits, table, split["test"], ds_of, n_boot=0, min_test=5)
    b = res[(res["fit"] == M1) & (res["model"] == M1) & (res["dataset"] == "B")]
    assert b["note"].item() == NOT_IN_DATASET
    pooled = res[(res["fit"] == M1) & (res["model"] == M1) & (res["dataset"] == POOLED) & (res["metric"] == "spearman")]
    assert pooled["n"].item() == 12 and pooled["note"].item() == "pooled over the datasets it was fitted in"


def test_constant_within_a_dataset_is_the_dataset_median():
    # why within_heads lists prompt_len only: domain_median already is the constant fitted per dataset
    inputs, table, split, ds_of = simpson()
    cfg = HeadSettings()
    fits, preds = fit_all([HeadSpec("constant", cfg, None, (M1,), within=True),
                           HeadSpec("domain_median", cfg, None, (M1,))], inputs, table, split, min_train=5)
    p = preds.pivot(index="id", columns="head", values="y_pred")
    np.testing.assert_allclose(p["constant (within dataset)"], p["domain_median"])


def test_every_castillo_fit_goes_through_run_training_with_the_search_node(monkeypatch):
    # item 1's protocol (a `search:` node: the same budget for every head) reaches the proxies here too
    from lengthpred.crossmodel import fits as fits_mod
    from lengthpred.data.castillo import MODELS as ALL13
    from lengthpred.heads import run_training
    from lengthpred.stages.castillo import head_specs
    from tests.conftest import compose_cfg

    assert fits_mod.run_training is run_training  # the standard path, not a CASTILLO copy
    cfg = compose_cfg(["experiment=castillo", "search.budget=3", "search.subsample=64"])
    specs = head_specs(cfg, list(ALL13))
    assert {s.label for s in specs} >= {"proxy_rank", "prompt_len (pooled fit)", "prompt_len (within dataset)"}
    assert all(s.settings.search.budget == 3 for s in specs)  # the budget is the root's for every head
    # the proxies and lora search on their own subsample (castillo.yaml's head_overrides), every other head on the root's
    assert all(s.settings.search.subsample == (128 if s.name.startswith("proxy_") or s.name == "lora" else 64) for s in specs)
    default = head_specs(compose_cfg(["experiment=castillo"]), list(ALL13))
    assert all(s.settings.search.budget == 8 for s in default)  # the root node every head shares
    seen = []

    def spy(name, settings, *args, **kw):
        seen.append((name, settings.search))
        return run_training(name, settings, *args, **kw)

    monkeypatch.setattr(fits_mod, "run_training", spy)
    inputs, table, split, _ = simpson()
    spec = HeadSpec("prompt_len", HeadSettings(search=SearchSettings(budget=3)), None, (M1,), within=True)
    fit_all([spec], inputs, table, split, min_train=5)
    assert seen == [("prompt_len", SearchSettings(budget=3))] * 2  # one standard fit per dataset
