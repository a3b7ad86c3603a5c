"""Cross-domain pairs offline (lengthpred.heads.cross): one fit per distinct train/val, the pair's own train
ids, skipped pairs, and the train stage's `cross_domain` switch end to end on a multi-domain trace."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError
from lengthpred.heads import HeadInput, HeadSettings, LabeledSet
from lengthpred.heads.cross import cross_mode, fit_cross, select_cross
from tests.conftest import compose_cfg

CONSTANT = HeadSettings()
LINEAR = HeadSettings(select={"alpha": [0.1, 1e3]})


def synthetic(domains: dict[str, list[float]]):
    """ids `<domain>-<i>` with the given lengths; X's first column tracks log length."""
    y = {f"{d}-{i}": v for d, vals in domains.items() for i, v in enumerate(vals)}
    rng = np.random.default_rng(0)
    x = {i: np.r_[np.log1p(v), rng.normal(size=3)].astype(np.float32) for i, v in y.items()}
    calls: list[tuple[str, ...]] = []

    def make_set(ids, split):
        ids = [i for i in ids if i in y]
        calls.append(tuple(ids))
        if not ids:
            return None
        inp = HeadInput(ids=ids, features=np.stack([x[i] for i in ids]), domains=[i.split("-")[0] for i in ids])
        return LabeledSet(inp, np.array([y[i] for i in ids]))

    return y, make_set, calls


def pair(src: str, tgt: str, train: list[str], val: list[str], test: list[str]) -> dict:
    return {"name": f"{src}->{tgt}", "source": src, "target": tgt, "train": train, "val": val, "test": test}


def ids(dom: str, idx) -> list[str]:
    return [f"{dom}-{i}" for i in idx]


def test_each_pair_is_fitted_on_its_own_train_ids_and_same_sets_share_a_fit():
    y, make_set, _ = synthetic({"a": [10, 20, 30, 40, 50, 60], "b": [100, 200, 300, 400], "c": [5, 7, 9, 11]})
    pairs = [
        pair("a", "c", ids("a", range(4)), ids("a", [4, 5]), ids("c", range(4))),
        pair("a", "b", ids("a", range(4)), ids("a", [4, 5]), ids("b", range(4))),
        # the same source after dedup against its target's test: other ids, so its own fit
        pair("a", "x", ids("a", range(3)), ids("a", [4, 5]), ids("b", [0, 1])),
        pair("mix", "c", ids("a", range(4)) + ids("b", range(3)), ids("b", [3]), ids("c", range(4))),
    ]
    res = fit_cross("constant", CONSTANT, pairs, make_set)
    assert res.n_fits == 3 and not res.skipped
    preds = res.predictions
    for p in pairs:
        rows = preds[preds["split"] == f"cross/{p['name']}/test"]
        assert sorted(rows["id"]) == sorted(p["test"])
        assert np.allclose(rows["y_pred"], np.median([y[i] for i in p["train"]]))
        assert res.scores[p["name"]]["n_train"] == len(p["train"])
        assert rows["domain"].eq(p["test"][0].split("-")[0]).all()
    assert res.scores["a->b"]["fitted_with"] == "a->c" and res.scores["a->x"]["fitted_with"] == "a->x"
    summary = res.summary("all")
    assert summary["n_pairs"] == 4 and summary["n_fits"] == 3 and summary["spearman_median"] is None

    unshared = fit_cross("constant", CONSTANT, pairs, make_set, share=False)
    assert unshared.n_fits == 4
    pd.testing.assert_frame_equal(unshared.predictions, preds)


def test_selection_runs_on_the_pairs_val_split_and_ranks_the_target():
    rng = np.random.default_rng(1)
    y, make_set, calls = synthetic({d: list(np.round(np.exp(rng.uniform(2, 6, 20)))) for d in "ab"})
    p = pair("a", "b", ids("a", range(14)), ids("a", range(14, 20)), ids("b", range(20)))
    res = fit_cross("linear", LINEAR, [p], make_set)
    assert tuple(ids("a", range(14, 20))) in calls  # its val set was built and used for selection
    s = res.scores["a->b"]
    assert s["selected"]["alpha"] in (0.1, 1e3) and s["val_spearman"] is not None
    assert s["spearman"] > 0.9 and s["n_test"] == 20


def test_bad_pairs_are_skipped_and_counted_not_fatal():
    _, make_set, _ = synthetic({"a": [1, 2, 3, 4], "flat": [50, 50, 50], "b": [5, 6, 7]})
    pairs = [
        pair("a", "flat", ids("a", range(3)), [], ids("flat", range(3))),  # 1 distinct test length
        pair("a", "b", ids("a", range(3)), [], ids("b", range(3))),
        pair("gone", "b", ["gone-0", "gone-1"], [], ids("b", range(3))),  # no train prompt has a target
        pair("a", "none", ids("a", range(3)), [], ["none-0"]),  # no test prompt has a target
    ]
    res = fit_cross("constant", CONSTANT, pairs, make_set)
    assert set(res.skipped) == {"a->flat", "gone->b", "a->none"} and list(res.scores) == ["a->b"]
    assert "2 distinct lengths" in res.skipped["a->flat"]
    m = res.metrics("all")
    assert m["n_cross_skipped"] == 3 and m["cross_summary"]["n_scored"] == 1
    assert set(res.predictions["split"]) == {"cross/a->b/test"}


def test_cross_domain_config_values():
    assert [cross_mode(v) for v in (True, False, None, "single", "MIX", "true", "false")] == [
        "all", "none", "none", "single", "mix", "all", "none",
    ]
    with pytest.raises(ConfigError, match="cross_domain"):
        cross_mode("some")
    ps = [{"source": "a"}, {"source": "mix"}]
    assert select_cross(ps, "single") == ps[:1] and select_cross(ps, "mix") == ps[1:]
    assert select_cross(ps, "all") == ps and select_cross(ps, "none") == []


@pytest.fixture(scope="module")
def domain_trace(tmp_path_factory):
    """A 60-prompt trace in 3 domains (one with a single length, so its pairs must be skipped)."""
    from lengthpred.stages.data import prepare

    tmp = tmp_path_factory.mktemp("cross")
    rng = np.random.default_rng(0)
    with open(tmp / "trace.jsonl", "w") as f:
        for i in range(60):
            task = ("short", "long", "flat")[i % 3]
            length = {"short": 20 + rng.integers(0, 30), "long": 300 + rng.integers(0, 200), "flat": 64}[task]
            f.write(json.dumps({"prompt": f"{task} prompt number {i}", "length": int(length), "task": task}) + "\n")

    def cfg_for(head: str, *extra: str):
        return compose_cfg(
            [
                "model=tiny",
                "data=trace",
                f"data.train_path={tmp / 'trace.jsonl'}",
                "data.domain_field=task",
                "data.test_fraction=0.3",
                "data.val_fraction=0.2",
                f"paths.data_dir={tmp / 'data'}",
                f"head={head}",
                "features.pools=[last]",
                "features.fused=[]",
                "features.token_layers=[]",
                *extra,
            ],
            tmp / f"run-{head}",
        )

    prepare(cfg_for("constant"))
    return cfg_for


def test_train_stage_writes_every_pair_and_switches_off(domain_trace):
    from lengthpred.data import load_prompts, load_splits
    from lengthpred.stages.train import train_from_config

    cfg = domain_trace("constant")
    out = cfg.paths.output_dir
    m = train_from_config(cfg, out)
    splits = load_splits(cfg.data)
    y = {r["id"]: r["length"] for r in load_prompts(cfg.data)}
    pairs = {p["name"]: p for p in splits["cross"]}
    assert len(pairs) == 9  # 3 targets x (2 single sources + mix)
    preds = pd.read_parquet(f"{out}/predictions.parquet")
    cross = preds[preds["split"].str.startswith("cross/")]
    skipped = {n for n in pairs if n.endswith("->flat")}
    assert set(m["cross_skipped"]) == skipped and m["n_cross_skipped"] == 3
    saved = json.loads(open(f"{out}/metrics.json").read())
    assert set(saved["cross"]) == set(pairs) - skipped
    for name, p in pairs.items():
        rows = cross[cross["split"] == f"cross/{name}/test"]
        if name in skipped:
            assert rows.empty
            continue
        assert sorted(rows["id"]) == sorted(p["test"]) and (rows["domain"] == p["target"]).all()
        assert np.allclose(rows["y_pred"], np.median([y[i] for i in p["train"]]))  # its own source's train
        assert saved["cross"][name]["n_train"] == len(p["train"])
        assert set(saved["cross"][name]) >= {"spearman", "kendall", "mae", "n_train", "n_test"}

    off = domain_trace("constant", "++cross_domain=false")
    m_off = train_from_config(off, out)  # same run dir: the earlier cross rows are stale, so dropped
    assert "cross" not in m_off
    after = pd.read_parquet(f"{out}/predictions.parquet")
    assert not after["split"].str.startswith("cross/").any() and len(after) == len(preds) - len(cross)


def test_train_stage_cross_pairs_on_features(domain_trace, one_torch_thread):
    """A features head (tiny model, last pooling) on the single-source pairs only."""
    from lengthpred.stages.train import train_from_config

    cfg = domain_trace("linear", "head.layer=2", "++cross_domain=single")
    m = train_from_config(cfg, cfg.paths.output_dir)
    assert set(m["cross"]) == {"short->long", "flat->long", "long->short", "flat->short"}
    assert m["cross_summary"]["mode"] == "single" and m["cross_summary"]["n_fits"] == 3
    preds = pd.read_parquet(f"{cfg.paths.output_dir}/predictions.parquet")
    assert preds["split"].str.startswith("cross/").sum() == sum(v["n_test"] for v in m["cross"].values())
    # search.cross: reuse (the default): every pair takes the in-domain choice made on validation
    assert all(v["selected"] == m["selected"] and v["n_candidates"] == 1 for v in m["cross"].values())
    assert m["n_candidates"] == 8  # the in-domain search itself drew the budget


def test_train_stage_cross_pairs_search_anew_when_told(domain_trace, one_torch_thread):
    from lengthpred.stages.train import train_from_config

    cfg = domain_trace("linear", "head.layer=2", "++cross_domain=single", "search.cross=search")
    m = train_from_config(cfg, cfg.paths.output_dir)
    assert 8 in {v["n_candidates"] for v in m["cross"].values()}  # a source with a usable val split searched anew
