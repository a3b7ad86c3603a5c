"""MLP heads over several seeds: run_training keeps the first seed, records every seed, and the results
file and T1 show mean ± sd over seeds beside the first seed's CI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError
from lengthpred.eval.results import Provenance, score_predictions
from lengthpred.eval.tables import table_t1
from lengthpred.heads import HeadSettings, run_training
from lengthpred.seeds import seed_column, seed_columns, seed_list, spread
from tests.test_heads_training import make_set, trace_run  # noqa: F401  (trace_run is a fixture)

PROBE = HeadSettings.from_mapping({
    "layer": 20,
    "pooling": "last",
    "params": {"hidden": 16, "epochs": 5, "random_state": 5},
    "select": {"binning": ["quantile", "uniform"]},
})
PROV = Provenance("e", "m", "d", "h")


def test_seed_helpers():
    assert seed_list(5, 3) == [5, 6, 7] and seed_list(0, 1) == [0]
    with pytest.raises(ValueError):
        seed_list(0, 0)
    cols = [seed_column(i) for i in (10, 2, 0)] + ["y_pred", "y_pred_seedx"]
    assert seed_columns(cols) == ["y_pred_seed0", "y_pred_seed2", "y_pred_seed10"]
    s = spread([0.5, 0.7, 0.6])
    assert (s.mean, s.n) == (pytest.approx(0.6), 3) and s.sd == pytest.approx(0.1)
    assert np.isnan(spread([0.5, None]).mean) and np.isnan(spread([0.5]).sd)


def test_run_training_over_seeds_keeps_the_first_and_records_each():
    train, val, test = make_set(60, 0), make_set(20, 1), make_set(20, 2)
    head, m, preds = run_training("probe", PROBE, train, val, test, n_seeds=3)
    single, m1, p1 = run_training("probe", PROBE, train, val, test)
    np.testing.assert_array_equal(preds["y_pred"], p1["y_pred"])  # the first seed is the single-seed run
    assert head.random_state == 5 and m["spearman"] == m1["spearman"] and "seeds" not in m1
    assert m["n_seeds"] == 3 and [s["random_state"] for s in m["seeds"]] == [5, 6, 7]
    assert all(s["selected"]["binning"] in ("quantile", "uniform") for s in m["seeds"])  # each seed selects
    assert seed_columns(preds.columns) == ["y_pred_seed0", "y_pred_seed1", "y_pred_seed2"]
    np.testing.assert_array_equal(preds["y_pred_seed0"], preds["y_pred"])
    assert not np.array_equal(preds["y_pred_seed1"], preds["y_pred_seed0"])  # seeds do differ
    rhos = [s["spearman"] for s in m["seeds"]]
    assert m["spearman_seed_mean"] == pytest.approx(np.mean(rhos))
    assert m["spearman_seed_sd"] == pytest.approx(np.std(rhos, ddof=1))


def test_seeds_need_a_head_with_a_random_state():
    train, test = make_set(30, 0), make_set(10, 1)
    with pytest.raises(ConfigError, match="random_state"):
        run_training("linear", HeadSettings(), train, None, test, n_seeds=3)


def _seeded_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    y = rng.uniform(10, 500, 30)
    rows = []
    for dom in ("chat", "math"):
        seeds = [y + rng.normal(0, s, 30) for s in (40, 60, 80)]
        f = pd.DataFrame({"head": "probe", "split": f"indomain/{dom}/test", "id": [f"{dom}{i}" for i in range(30)],
                          "domain": dom, "y_true": y, "y_pred": seeds[0], "n_samples": 3, "capped_frac": 0.0})
        for i, s in enumerate(seeds):
            f[seed_column(i)] = s
        rows.append(f)
        rows.append(f.iloc[:, :8].assign(head="linear", y_pred=y + rng.normal(0, 50, 30)))
    return pd.concat(rows, ignore_index=True)  # linear rows: NaN seed columns, as after a concat


def test_results_and_t1_show_mean_and_sd_over_seeds():
    df = _seeded_frame()
    res = score_predictions(df, PROV, ["spearman", "mae"], n_boot=50)
    get = {(r.head, r.split, r.metric): r for r in res.itertuples()}
    from lengthpred.metrics import METRICS

    g = df[(df["head"] == "probe") & (df["split"] == "indomain/chat/test")]
    per_seed = [METRICS.get("spearman")(g["y_true"], g[c]) for c in seed_columns(g.columns)]
    row = get[("probe", "indomain/chat/test", "spearman_seed_mean")]
    assert row.value == pytest.approx(np.mean(per_seed)) and pd.isna(row.ci_low)  # no CI: a spread
    assert get[("probe", "indomain/chat/test", "spearman_seed_sd")].value == pytest.approx(np.std(per_seed, ddof=1))
    assert get[("probe", "indomain/chat/test", "n_seeds")].value == 3.0
    assert ("probe", "indomain/chat/test", "mae_seed_mean") in get
    assert not any(k[0] == "linear" and "seed" in k[2] for k in get)  # no seed columns: no seed rows
    md = table_t1(res).to_markdown()
    probe_row = next(ln for ln in md.splitlines() if ln.startswith("| chat | probe |"))
    assert f"{np.mean(per_seed):.3f} ± {np.std(per_seed, ddof=1):.3f} (3)" in probe_row
    linear_row = next(ln for ln in md.splitlines() if ln.startswith("| chat | linear |"))
    assert linear_row.split("|")[4].strip() == "—"
    assert "Spearman over seeds ↑" in md and "Noise ceiling (estimate) ↑" in md


def test_train_stage_fits_seeds_in_domain_only(trace_run):  # noqa: F811
    from lengthpred.eval.predictions import read_predictions
    from lengthpred.stages.train import train_from_config

    cfg = trace_run("probe", "head.layer=2", "head.params.epochs=3", "head.params.hidden=8")
    assert cfg.head.n_seeds == 3  # conf/head/probe.yaml
    m = train_from_config(cfg, cfg.paths.output_dir)
    saved = json.loads(open(f"{cfg.paths.output_dir}/metrics.json").read())
    assert saved["n_seeds"] == 3 and len(saved["seeds"]) == 3
    assert saved["seeds"][0]["spearman"] == m["spearman"]
    preds = read_predictions(f"{cfg.paths.output_dir}/predictions.parquet")
    assert seed_columns(preds.columns) == ["y_pred_seed0", "y_pred_seed1", "y_pred_seed2"]
    res = score_predictions(preds, PROV, ["spearman"], n_boot=0)
    assert (res["metric"] == "spearman_seed_mean").any()


def test_small_forelen_subsets_are_not_scored():
    from lengthpred.heads.assemble import MIN_SUBSET, forelen_ids

    splits = {"forelen": {"rl": [f"r{i}" for i in range(MIN_SUBSET + 2)], "longseq": ["a", "b"]}}
    out = forelen_ids(splits, exclude={"r0", "r1", "r2"})
    assert list(out) == []  # 29 left after removing seen prompts
    out = forelen_ids(splits, exclude={"r0"})
    assert list(out) == ["forelen/rl"] and len(out["forelen/rl"]) == MIN_SUBSET + 1
