"""The adapt stage end to end on injected synthetic inputs (no model): config, outputs, predictions file."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError
from lengthpred.eval.predictions import read_predictions
from lengthpred.stages.adapt import build_heads, run_adaptation
from tests.conftest import compose_cfg


class _Features:
    def __init__(self, ids, X):
        self.ids, self._X = ids, X

    def get(self, name):
        assert name == self.name
        return self._X

    name = "hs.L20.last"


def _synthetic(d: int = 12, seed: int = 0, k: int = 3):
    """Three domains with k sampled lengths per prompt (some capped at 512); b is a small shift from a,
    c a large one (different planted weights). Pairs a->b, a->c and b->c (c is shared by two pairs)."""
    rng = np.random.default_rng(seed)
    w = {"a": rng.normal(size=d) / np.sqrt(d)}
    w["b"] = w["a"] + 0.2 * rng.normal(size=d) / np.sqrt(d)
    w["c"] = rng.normal(size=d) / np.sqrt(d)
    ids, X, rows, indomain = [], [], [], {}
    for dom, n in (("a", 120), ("b", 90), ("c", 90)):
        Xd = rng.normal(size=(n, d)) + (1.0 if dom == "c" else 0.0)
        mu = 4 + 0.5 * Xd @ w[dom]
        dids = [f"{dom}{i:04d}" for i in range(n)]
        ids += dids
        X.append(Xd)
        for i, m in zip(dids, mu, strict=True):
            s = np.minimum(np.rint(np.exp(m + 0.3 * rng.normal(size=k))), 512).astype(int)
            rows.append(
                {
                    "id": i,
                    "y": float(s.mean()),
                    "lengths": [int(v) for v in s],
                    "finish_reasons": ["length" if v >= 512 else "eos" for v in s],
                    "n_samples": k,
                    "capped_frac": float(np.mean(s >= 512)),
                    "domain": dom,
                }
            )
        indomain[dom] = {
            "train": dids[: n // 2],
            "val": dids[n // 2 : 3 * n // 4],
            "test": dids[3 * n // 4 :],
        }
    cross = [
        {
            "name": f"{s}->{t}",
            "source": s,
            "target": t,
            "train": indomain[s]["train"],
            "val": [],
            "test": indomain[t]["test"],
            "shift": {"length_wasserstein": sh},
        }
        for s, t, sh in (("a", "b", 0.1), ("a", "c", 1.5), ("b", "c", 1.4))
    ]
    return {"indomain": indomain, "cross": cross}, _Features(ids, np.vstack(X)), pd.DataFrame(rows)


FAST = ["online.alpha=1.0", "online.record_every=10", "online.n_boot=200", "online.stream_seeds=2",
        "online.export_readouts=false"]  # synthetic features, not the model's states (exported below)


def test_each_pair_exports_its_adapted_readout_for_the_server(tmp_path):
    """The chosen head after the stream is written as a readout file with the model's identity; it predicts as
    the stream's final head did on the target's test prompts, and a feature the server cannot read exports nothing."""
    from lengthpred.models.tiny import TINY_HIDDEN
    from lengthpred.online.readout_file import read_readout

    splits, fs, targets = _synthetic(d=TINY_HIDDEN)
    fs.name = "hs.L2.last"
    cfg = compose_cfg([*FAST[:-1], "model=tiny", "online.feature=hs.L2.last", "online.pairs=['a->c']"], tmp_path)
    res = run_adaptation(cfg, tmp_path / "run", splits=splits, feature_set=fs, targets=targets)
    path = tmp_path / "run" / "readouts" / "a__c.safetensors"
    assert res["readouts"] == {"a->c": str(path)}
    assert json.loads((tmp_path / "run" / "adapt.json").read_text())["readouts"] == {"a->c": str(path)}
    r = read_readout(path)
    assert r.layer == 2 and r.identity.hidden_size == TINY_HIDDEN and r.estimator.n_updates_ > 0
    preds = read_predictions(tmp_path / "run" / "predictions.parquet")
    final = preds[(preds["head"] == "rls@val") & preds["split"].str.endswith("/test")].set_index("id")["y_pred"]
    X = fs.get("hs.L2.last")[[fs.ids.index(i) for i in final.index]]
    np.testing.assert_allclose(r.estimator.predict(X), final.to_numpy(), rtol=1e-6)

    fs.name = "hs.L2.mean"
    cfg = compose_cfg([*FAST[:-1], "model=tiny", "online.feature=hs.L2.mean", "online.pairs=['a->c']"], tmp_path)
    res = run_adaptation(cfg, tmp_path / "mean", splits=splits, feature_set=fs, targets=targets)
    assert "readouts" not in res and not (tmp_path / "mean" / "readouts").exists()

    cfg = compose_cfg([*FAST[:-1], "model=tiny", "online.feature=hs.L20.last"], tmp_path)
    with pytest.raises(ConfigError, match="1..3 for tiny") as e:  # the tiny model has 4 layers
        run_adaptation(cfg, tmp_path / "deep", splits=splits, feature_set=fs, targets=targets)
    assert "\n" not in str(e.value) and not (tmp_path / "deep" / "summary.csv").exists()


@pytest.mark.parametrize("option", ["rls", "sweep"])
def test_online_options_compose_and_build(option, tmp_path):
    cfg = compose_cfg([f"online={option}"], tmp_path)
    heads = build_heads(cfg.online, 1.0)
    assert {"static", "sgd", "window", "oracle_refit", "indomain", "rls@1", "rls@0.99"} <= set(heads)
    assert heads["indomain"].fit_on == "stream" and not heads["static"].update


def test_lambda_out_of_range_fails_before_work(tmp_path):
    cfg = compose_cfg(["online.forgetting=[1.0,1.2]"], tmp_path)
    with pytest.raises(ConfigError, match=r"\(0, 1\]"):
        run_adaptation(cfg, tmp_path)  # no inputs passed: must fail before loading any


def test_run_adaptation_writes_curves_gains_and_predictions(tmp_path):
    splits, fs, targets = _synthetic()
    cfg = compose_cfg(FAST, tmp_path)
    res = run_adaptation(cfg, tmp_path, splits=splits, feature_set=fs, targets=targets)
    assert res["n_pairs"] == 3
    for f in (
        "curves.csv",
        "stream_curves.csv",
        "summary.csv",
        "pairs.csv",
        "gains.csv",
        "per_target.csv",
        "adapt.json",
        "plots/gain_vs_shift.png",
        "plots/adaptation_summary.png",
        "plots/adaptation_by_target.png",
        "plots/curves_a_to_b.png",
        "plots/curves_a_to_c.png",
    ):
        assert (tmp_path / f).is_file(), f
    preds = read_predictions(tmp_path / "predictions.parquet")
    assert set(preds["split"]) == {
        f"cross/{p}/{part}" for p in ("a->b", "a->c", "b->c") for part in ("test", "stream", "stream_val")
    }
    assert {
        "rls@0.999",
        "rls@val",
        "rls@1+mean",
        "static",
        "sgd",
        "window",
        "oracle_refit",
        "indomain",
    } <= set(preds["head"])
    test_rows = preds[preds["split"].str.endswith("/test")]
    stream_rows = preds[~preds["split"].str.endswith("/test")]
    assert (test_rows["n_samples"] == 3).all() and (stream_rows["n_samples"] == 1).all()
    # the val part of the stream is the target's in-domain val, and the test ids are never streamed
    val_ids = set(stream_rows[stream_rows["split"].str.endswith("stream_val")]["id"])
    assert val_ids == set(splits["indomain"]["b"]["val"]) | set(splits["indomain"]["c"]["val"])
    assert not set(stream_rows["id"]) & set(test_rows["id"])
    gains = pd.read_csv(tmp_path / "gains.csv").set_index(["pair", "head"])
    assert "stream_spearman_gain_pct" not in gains.columns  # absolute differences only
    big, small = gains.loc[("a->c", "rls@val")], gains.loc[("a->b", "rls@val")]
    assert big["test_spearman_delta"] > 0.3 and big["test_spearman_delta"] > small["test_spearman_delta"]
    assert big["stream_spearman_delta"] > 0.2
    pairs = pd.read_csv(tmp_path / "pairs.csv").set_index("pair")
    assert set(pairs["forgetting"]) <= {1.0, 0.999, 0.99}
    assert np.allclose(pairs["load"], 0.7) and (pairs["labels_seen_mean"] > 20).all()
    per = pd.read_csv(tmp_path / "per_target.csv").set_index("target")
    assert (
        list(per.index) == ["b", "c", "all"] and per.at["c", "n_pairs"] == 2 and per.at["all", "n_pairs"] == 3
    )
    for prefix in ("rls", "mean_oracle"):
        for part in ("test", "stream"):
            d, lo, hi = (per[f"{prefix}_{part}_delta{x}"] for x in ("", "_lo", "_hi"))
            assert (lo <= d + 1e-9).all() and (d <= hi + 1e-9).all()
    assert per.at["c", "rls_test_delta_lo"] > 0  # the large shift: RLS helps, interval above zero
    meta = json.loads((tmp_path / "adapt.json").read_text())
    assert meta["config"]["forgetting"] == [1.0, 0.999, 0.99]
    assert meta["load"] == pytest.approx(0.7) and meta["labels_seen_mean"] == pytest.approx(
        per.at["all", "labels_seen_mean"]
    )
    sc = pd.read_csv(tmp_path / "stream_curves.csv")
    assert {"pair", "source", "target", "head", "labels_seen", "stream_spearman_delta"} <= set(sc.columns)
    assert (sc[sc["head"] == "static"]["stream_spearman_delta"] == 0).all()


def test_a_completion_reveals_one_sample_not_the_mean(tmp_path):
    splits, fs, targets = _synthetic(seed=2)
    cfg = compose_cfg([*FAST, "online.pairs=['a->c','b->c']"], tmp_path)
    run_adaptation(cfg, tmp_path, splits=splits, feature_set=fs, targets=targets)
    preds = read_predictions(tmp_path / "predictions.parquet")
    st = preds[preds["split"].str.contains("/stream") & (preds["head"] == "static")]
    by_id = targets.set_index("id")
    assert all(int(y) in by_id.at[i, "lengths"] for i, y in zip(st["id"], st["y_true"], strict=True))
    means = by_id.loc[st["id"], "y"].to_numpy()
    assert np.mean(np.isclose(st["y_true"].to_numpy(), means)) < 0.5  # mostly not the mean of 3
    # pairs that share a target replay the same stream: same revealed sample for every id
    a, b = (st[st["split"].str.startswith(f"cross/{p}/")].set_index("id")["y_true"] for p in ("a->c", "b->c"))
    assert a.sort_index().equals(b.sort_index())


def test_lambda_and_shift_never_read_the_target_test(tmp_path):
    """Scrambling the target-test lengths changes the test scores but not λ, the shift or the stream."""
    splits, fs, targets = _synthetic(seed=3)
    test_ids = {i for p in splits["cross"] for i in p["test"]}
    scrambled = targets.copy()
    rng = np.random.default_rng(9)
    for k in np.flatnonzero(scrambled["id"].isin(test_ids)):
        s = [int(v) for v in rng.integers(1, 2000, 3)]
        scrambled.at[k, "lengths"], scrambled.at[k, "y"] = s, float(np.mean(s))
    out = {}
    for name, t in (("a", targets), ("b", scrambled)):
        cfg = compose_cfg([*FAST, "online.plot_pairs=0"], tmp_path / name)
        run_adaptation(cfg, tmp_path / name, splits=splits, feature_set=fs, targets=t)
        out[name] = (
            pd.read_csv(tmp_path / name / "pairs.csv").set_index("pair"),
            pd.read_csv(tmp_path / name / "stream_curves.csv"),
            pd.read_csv(tmp_path / name / "summary.csv").set_index(["pair", "head"]),
        )
    (pa, sa, ua), (pb, sb, ub) = out["a"], out["b"]
    pd.testing.assert_series_equal(pa["forgetting"], pb["forgetting"])
    pd.testing.assert_series_equal(pa["shift"], pb["shift"])
    pd.testing.assert_frame_equal(sa, sb)
    assert not np.allclose(ua["test_spearman"], ub["test_spearman"], equal_nan=True)


def test_shift_is_measured_on_served_lengths_of_source_train_vs_target_stream(tmp_path):
    from scipy.stats import wasserstein_distance

    splits, fs, targets = _synthetic(seed=4)
    cfg = compose_cfg([*FAST, "online.plot_pairs=0"], tmp_path)
    run_adaptation(cfg, tmp_path, splits=splits, feature_set=fs, targets=targets)
    pairs = pd.read_csv(tmp_path / "pairs.csv").set_index("pair")
    lengths = targets.set_index("id")["lengths"]
    for p in splits["cross"]:
        stream = splits["indomain"][p["target"]]["train"] + splits["indomain"][p["target"]]["val"]
        src = np.log1p([v for i in p["train"] for v in lengths[i]])
        tgt = np.log1p([v for i in stream for v in lengths[i]])
        assert pairs.at[p["name"], "shift"] == pytest.approx(wasserstein_distance(src, tgt))
        assert pairs.at[p["name"], "prompt_shift"] == p["shift"]["length_wasserstein"]


def test_choose_forgetting_reads_validation_scores_only():
    from lengthpred.online.select import choose_forgetting

    summary = pd.DataFrame(
        {
            "head": ["rls@1", "rls@0.999", "rls@0.99"],
            "val_spearman": [0.5, 0.4, 0.3],
            "test_spearman": [0.1, 0.2, 0.9],
            "stream_spearman": [0.1, 0.2, 0.9],
        }
    )
    assert choose_forgetting(summary, ["rls@1", "rls@0.999", "rls@0.99"]) == "rls@1"
    summary["val_spearman"] = [0.4, 0.6, 0.6]  # a tie goes to the larger λ
    assert choose_forgetting(summary, ["rls@0.99", "rls@0.999", "rls@1"]) == "rls@0.999"
    summary["val_spearman"] = np.nan  # undefined everywhere: no forgetting
    assert choose_forgetting(summary, ["rls@0.99", "rls@1"]) == "rls@1"


def test_per_target_summary_bootstraps_prompts_of_the_shared_target():
    from lengthpred.online.summary import per_target_summary

    rng = np.random.default_rng(0)
    y = rng.lognormal(5, 1, 40)
    rows, srows = [], []
    for pair, noise in (("x->t", 0.3), ("z->t", 0.6)):
        for head, p in (
            ("static", y * rng.lognormal(0, 2, 40)),
            ("rls@val", y * rng.lognormal(0, noise, 40)),
        ):
            for k in range(40):
                r = {"pair": pair, "target": "t", "head": head, "id": f"i{k}", "y_true": y[k], "y_pred": p[k]}
                rows.append(r)
                srows.append({**r, "is_val": k < 8, "labels_seen": k, "in_flight": 2})
    pairs = pd.DataFrame(
        {"pair": ["x->t", "z->t"], "target": "t", "shift": [0.2, 0.4], "load": 0.7, "forgetting": [1.0, 0.99]}
    )
    per = per_target_summary(pd.DataFrame(rows), pd.DataFrame(srows), pairs, {"rls": "rls@val"}, n_boot=300)
    t, a = per.iloc[0], per.iloc[1]
    assert t["target"] == "t" and a["target"] == "all" and t["n_pairs"] == 2
    assert t["n_stream"] == 32 and t["n_val"] == 8 and t["forgetting"] == "1 (1), 0.99 (1)"
    assert (
        t["rls_test_delta_lo"] > 0 and t["rls_test_delta_lo"] < t["rls_test_delta"] < t["rls_test_delta_hi"]
    )
    assert t["labels_seen_ge10"] == pytest.approx(30 / 40) and t["shift_mean"] == pytest.approx(0.3)
    # a head equal to the baseline has no difference and a degenerate interval
    same = pd.DataFrame(rows).replace({"head": {"rls@val": "copy"}})
    same = pd.concat([same[same["head"] == "static"], same[same["head"] == "static"].assign(head="copy")])
    s_same = same.assign(is_val=False, labels_seen=0, in_flight=0)
    per2 = per_target_summary(same, s_same, pairs, {"c": "copy"}, n_boot=50)
    assert per2.iloc[0]["c_test_delta"] == 0 and per2.iloc[0]["c_test_delta_hi"] == 0
    # pairs of one target must share its lengths
    bad = pd.DataFrame(rows)
    bad.loc[bad["pair"] == "z->t", "y_true"] *= 2
    with pytest.raises(Exception, match="differ between pairs"):
        per_target_summary(bad, pd.DataFrame(srows), pairs, {"rls": "rls@val"}, n_boot=10)


def test_every_online_option_builds_its_completion_model(tmp_path):
    from lengthpred.stages.adapt import build_completion

    for option in ("serving", "instant", "simulated"):
        comp = build_completion(compose_cfg([f"online/completion={option}"], tmp_path).online)
        arr, done = comp.schedule(np.array([30.0, 5.0, 60.0]))
        assert (done[np.isfinite(done)] >= arr[np.isfinite(done)]).all()


def test_tracker_gets_tables_images_and_headline(tmp_path):
    class _Rec:
        def __init__(self):
            self.tables, self.images, self.summ = [], [], {}

        def log_table(self, key, columns, rows):
            self.tables.append((key, len(rows)))

        def log_image(self, key, path):
            self.images.append(key)

        def summary(self, values):
            self.summ.update(values)

    splits, fs, targets = _synthetic(seed=1)
    rec = _Rec()
    cfg = compose_cfg(
        ["online.alpha=1.0", "online.forgetting=[0.99]", "online.record_every=20", "online.n_boot=50"]
        + ["online.stream_seeds=2", "online.export_readouts=false"],
        tmp_path,
    )
    run_adaptation(cfg, tmp_path, splits=splits, feature_set=fs, targets=targets, tracker=rec)
    assert {k for k, _ in rec.tables} == {
        "online/summary",
        "online/gains",
        "online/curves",
        "online/stream_curves",
        "online/pairs",
        "online/pairs_seeds",
        "online/per_target",
    }
    assert {"online/gain_vs_shift", "online/adaptation_summary", "online/adaptation_by_target"} <= set(
        rec.images
    )
    assert rec.summ["forgetting_chosen"] == "0.99 (6)" and "rls@val/test_spearman_delta_lo" in rec.summ


def _seeded_frames(deltas_by_seed, n=60, seed=0):
    """One target, two pairs; per stream seed, an RLS head whose test predictions track y by that seed's
    noise level (static: the same weak predictor in every seed)."""
    rng = np.random.default_rng(seed)
    y = rng.lognormal(5, 1, n)
    static = {q: y * rng.lognormal(0, 1.5, n) for q in ("x->t", "z->t")}
    rows, srows, meta = [], [], []
    for sd, noise in enumerate(deltas_by_seed):
        for pair in ("x->t", "z->t"):
            r_noise = rng.lognormal(0, noise, n)
            for head, p in (("static", static[pair]), ("rls@val", y * r_noise)):
                for k in range(n):
                    r = {
                        "pair": pair,
                        "target": "t",
                        "head": head,
                        "id": f"i{k}",
                        "y_true": y[k],
                        "y_pred": p[k],
                    }
                    rows.append({**r, "stream_seed": sd})
                    srows.append({**r, "stream_seed": sd, "is_val": k < 10, "labels_seen": k, "in_flight": 1})
            meta.append(
                {"pair": pair, "target": "t", "shift": 0.3, "load": 0.7, "forgetting": 1.0, "stream_seed": sd}
            )
    return pd.DataFrame(rows), pd.DataFrame(srows), pd.DataFrame(meta)


def test_per_target_summary_averages_stream_seeds():
    """Seeds that disagree: the seed average differs from seed 0 alone, its sd over seeds is reported."""
    from lengthpred.online.summary import per_target_summary

    te, st, meta = _seeded_frames([0.2, 3.0, 3.0, 3.0])  # seed 0 is a lucky draw
    per = per_target_summary(te, st, meta, {"rls": "rls@val"}, n_boot=200).set_index("target")
    one = per_target_summary(
        te[te["stream_seed"] == 0],
        st[st["stream_seed"] == 0],
        meta[meta["stream_seed"] == 0],
        {"rls": "rls@val"},
        n_boot=200,
    ).set_index("target")
    assert per.at["t", "n_seeds"] == 4 and one.at["t", "n_seeds"] == 1 and per.at["t", "n_pairs"] == 2
    assert per.at["t", "rls_test_delta"] < one.at["t", "rls_test_delta"] - 0.1
    assert per.at["t", "rls_test_delta_seed_sd"] > 0.1 and np.isnan(one.at["t", "rls_test_delta_seed_sd"])
    assert per.at["t", "forgetting"] == "1 (8)"


def test_interval_widens_when_seeds_disagree():
    """Same prompts and mean delta scale: seeds that disagree widen the interval (seeds are resampled)."""
    from lengthpred.online.summary import per_target_summary

    heads = {"rls": "rls@val"}
    agree = per_target_summary(*_seeded_frames([1.0] * 6, seed=2), heads, n_boot=400).set_index("target")
    split = per_target_summary(
        *_seeded_frames([0.1, 0.1, 0.1, 4.0, 4.0, 4.0], seed=2), heads, n_boot=400
    ).set_index("target")
    w_agree = agree.at["t", "rls_test_delta_hi"] - agree.at["t", "rls_test_delta_lo"]
    w_split = split.at["t", "rls_test_delta_hi"] - split.at["t", "rls_test_delta_lo"]
    assert w_split > 1.5 * w_agree
    assert split.at["t", "rls_test_delta_seed_sd"] > 3 * agree.at["t", "rls_test_delta_seed_sd"]
    for per in (agree, split):  # the point estimate lies inside its interval
        assert (
            per.at["t", "rls_test_delta_lo"]
            <= per.at["t", "rls_test_delta"]
            <= per.at["t", "rls_test_delta_hi"]
        )


def test_every_stream_seed_chooses_lambda_without_the_target_test(tmp_path):
    """Per pair and seed, λ and the stream are unchanged when the target-test lengths are scrambled; the
    seeds differ in arrival order and revealed samples."""
    splits, fs, targets = _synthetic(seed=3)
    test_ids = {i for p in splits["cross"] for i in p["test"]}
    scrambled = targets.copy()
    rng = np.random.default_rng(9)
    for k in np.flatnonzero(scrambled["id"].isin(test_ids)):
        s = [int(v) for v in rng.integers(1, 2000, 3)]
        scrambled.at[k, "lengths"], scrambled.at[k, "y"] = s, float(np.mean(s))
    out = {}
    for name, t in (("a", targets), ("b", scrambled)):
        cfg = compose_cfg(
            ["online.alpha=1.0", "online.record_every=10", "online.n_boot=50", "online.plot_pairs=0"]
            + ["online.stream_seeds=[0,5,7]", "online.export_readouts=false"],
            tmp_path / name,
        )
        run_adaptation(cfg, tmp_path / name, splits=splits, feature_set=fs, targets=t)
        out[name] = (
            pd.read_csv(tmp_path / name / "pairs_seeds.csv").set_index(["pair", "stream_seed"]),
            pd.read_csv(tmp_path / name / "per_target.csv").set_index("target"),
        )
    (sa, pa), (sb, pb) = out["a"], out["b"]
    assert sorted(sa.index.get_level_values("stream_seed").unique()) == [0, 5, 7]
    cols = ["forgetting", "shift", "labels_seen_mean", "in_flight_mean", "n_revealed"]
    pd.testing.assert_frame_equal(sa[cols], sb[cols])
    assert (pa["n_seeds"] == 3).all()
    assert not np.allclose(pa["rls_test_delta"], pb["rls_test_delta"], equal_nan=True)
    # seeds differ: arrival order (labels seen per request) varies across seeds of one pair
    assert sa.xs("a->b", level="pair")["labels_seen_mean"].nunique() > 1 or (
        sa.xs("a->b", level="pair")["in_flight_mean"].nunique() > 1
    )


def test_stream_seeds_spec():
    from lengthpred.online.experiment import stream_seeds

    assert stream_seeds(3, 4) == [4, 5, 6] and stream_seeds([2, 9]) == [2, 9]
    with pytest.raises(ConfigError):
        stream_seeds(0)
    with pytest.raises(ConfigError):
        stream_seeds([1, 1])
