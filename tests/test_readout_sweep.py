"""Layers chosen on validation and pooling separated from head: the per-layer choice never reads test, the
layer-curve figure and layer_choice.json are written, MLP cells are aggregated over seeds, and the pooling
table's paired differences compare the same head (pooling) or the same pooling (head)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError, DataError
from lengthpred.heads import HeadSettings, layer_choice, pooling_table
from lengthpred.heads.sweep import fit_cell, fit_cells
from lengthpred.metrics import METRICS
from lengthpred.names import FeatureKey
from tests.test_heads_training import trace_run  # noqa: F401  (the fixture)


class FakeFeatures:
    """A FeatureSet stand-in: columns hs.L<l>.<pool> of synthetic [n, d] arrays keyed by prompt id."""

    pooling = {"span": "content", "drop_sink": False, "attn_norm": "lift", "fuse_on": "log"}

    def __init__(self, cols: dict[str, np.ndarray], ids: list[str], rows: list[int] | None = None):
        self.cols, self.all_ids = cols, ids
        self.rows = list(range(len(ids))) if rows is None else rows
        self.names = [*cols, "n_prompt_tokens"]

    def subset(self, ids):
        where = {i: k for k, i in enumerate(self.all_ids)}
        return FakeFeatures(self.cols, self.all_ids, [where[i] for i in ids])

    def get(self, name: str) -> np.ndarray:
        if name == "n_prompt_tokens":
            return np.full((len(self.rows), 1), 10.0, dtype=np.float32)
        return self.cols[name][self.rows]


def synthetic(n: int = 150, d: int = 6, signal_layer: int = 1, layers=(0, 1, 2), pools=("last", "mean")):
    """Prompts whose log length is linear in layer `signal_layer`'s `last` column; every other column noise."""
    rng = np.random.default_rng(0)
    ids = [f"p{i:03d}" for i in range(n)]
    z = rng.normal(size=(n, d))
    y = np.exp(4 + 0.8 * z[:, 0] + 0.3 * rng.normal(size=n)).round() + 1
    cols = {}
    for layer in layers:
        for p in pools:
            informative = layer == signal_layer and p == "last"
            cols[str(FeatureKey(layer, p))] = (z if informative else rng.normal(size=(n, d))).astype(np.float32)
    targets = pd.DataFrame({"y": y, "n_samples": 1, "capped_frac": 0.0}, index=ids)
    by_id = {i: {"id": i, "messages": [{"role": "user", "content": i}], "domain": "d"} for i in ids}
    split = {"train": ids[:90], "val": ids[90:120], "test": ids[120:]}
    return FakeFeatures(cols, ids), targets, by_id, split


PROBE = HeadSettings(params={"hidden": 8, "epochs": 3, "random_state": 0, "n_bins": 4}, select={"lr": [1e-2, 1e-3]})
LINEAR = HeadSettings(select={"alpha": [1.0, 100.0]})


def test_the_chosen_layer_is_the_validation_argmax_even_where_test_peaks_elsewhere(tmp_path):
    df = pd.DataFrame({
        "head": "linear", "pooling": "last", "layer": [0, 1, 2, 3],
        "val_spearman_seed_mean": [0.50, 0.70, 0.60, 0.70],  # best at 1 and 3: the lower layer on ties
        "spearman": [0.55, 0.60, 0.80, 0.65], "ci_low": 0.4, "ci_high": 0.9, "n_seeds": 1,
        "spearman_seed_mean": [0.55, 0.60, 0.80, 0.65], "spearman_seed_sd": np.nan,
    })
    choice = layer_choice.choose_layers(df)
    assert choice["linear"]["layer"] == 1 and choice["linear"]["test_spearman"] == pytest.approx(0.60)
    assert choice["linear"]["n_layers"] == 4
    path = layer_choice.write_choice(choice, tmp_path, model="m", data="d")
    doc = json.loads(path.read_text())
    assert doc["heads"]["linear"]["layer"] == 1 and doc["model"] == "m"
    assert layer_choice.read_layer(tmp_path, "linear") == 1 == layer_choice.read_layer(path, "linear")
    with pytest.raises(ConfigError, match="probe"):
        layer_choice.read_layer(path, "probe")
    with pytest.raises(DataError, match="no layer has a validation"):
        layer_choice.choose_layers(df.assign(val_spearman_seed_mean=np.nan))
    with pytest.raises(DataError, match="mixes poolings"):
        layer_choice.choose_layers(df.assign(pooling=["last", "mean", "last", "last"]))


def test_layer_sweep_finds_the_informative_layer_aggregates_seeds_and_draws_the_figure(tmp_path):
    from lengthpred.eval.plots import layer_curves

    features, targets, by_id, split = synthetic()
    cells = [(h, layer, "last") for h in ("linear", "probe") for layer in (0, 1, 2)]
    df = fit_cells(cells, {"linear": LINEAR, "probe": PROBE}, split, by_id, targets, features, n_boot=50, seed=0,
                   n_seeds=3, progress=False)
    assert set(df.loc[df["head"] == "linear", "n_seeds"]) == {1}  # ridge is deterministic: one fit
    assert set(df.loc[df["head"] == "probe", "n_seeds"]) == {3}
    assert df["val_spearman_seed_mean"].notna().all()
    choice = layer_choice.choose_layers(df)
    assert choice["linear"]["layer"] == 1
    out = layer_curves(df, choice, tmp_path / "curves.png", title="t")
    assert out.is_file() and out.stat().st_size > 10_000
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_an_mlp_cell_reports_the_mean_and_sd_of_its_seeds():
    features, targets, by_id, split = synthetic()
    row, preds = fit_cell(("probe", 1, "last"), PROBE, split, by_id, targets, features, n_boot=50, seed=0,
                          n_seeds=3)
    per_seed = [METRICS.get("spearman")(preds["y_true"], preds[f"y_pred_seed{i}"]) for i in range(3)]
    assert len(set(np.round(per_seed, 6))) > 1  # the seeds differ, so the mean is not the first seed's
    assert row["spearman_seed_mean"] == pytest.approx(np.mean(per_seed))
    assert row["spearman_seed_sd"] == pytest.approx(np.std(per_seed, ddof=1))
    assert row["spearman"] == pytest.approx(per_seed[0])
    one, _ = fit_cell(("linear", 1, "last"), HeadSettings(), split, by_id, targets, features, n_boot=0, seed=0, n_seeds=3)
    assert one["val_spearman"] is not None  # one candidate: val is still scored, so a layer can be chosen


def test_pooling_table_separates_pooling_from_head():
    features, targets, by_id, split = synthetic(layers=(1,), pools=("last", "mean"))
    rows, preds = [], {}
    for h, cfg in (("linear", LINEAR), ("probe", PROBE)):
        for p in ("last", "mean"):
            r, pr = fit_cell((h, 1, p), cfg, split, by_id, targets, features, n_boot=100, seed=0, n_seeds=3)
            rows.append(r)
            preds[(h, p)] = pr
    df = pd.DataFrame(rows)
    diffs = pooling_table.paired_differences(df, preds, reference_head="linear", n_boot=100, seed=0)
    by = {(r["kind"], r["head"], r["pooling"]): r for r in diffs.to_dict("records")}
    assert set(by) == {("pooling", "linear", "mean"), ("pooling", "probe", "mean"), ("head", "probe", "last"),
                       ("head", "probe", "mean")}
    lin = df[df["head"] == "linear"].set_index("pooling")["spearman"]
    assert by[("pooling", "linear", "mean")]["diff"] == pytest.approx(lin["mean"] - lin["last"])
    assert by[("pooling", "linear", "mean")]["ci_high"] < 0  # the noise column loses to the informative one
    assert pooling_table.val_best_pooling(df) == {"linear": "last", "probe": "last"}
    md = pooling_table.render(df, diffs, model="m", data="d", layer=1, reference_head="linear")
    assert "| last | " in md and "| mean | " in md and "(3 seeds)" in md
    assert "**Head vs linear, same pooling**" in md and "validation prefers the last token itself" in md


def test_pooling_pairs_compare_two_poolings_under_the_same_head():
    features, targets, by_id, split = synthetic(layers=(1,), pools=("last", "mean"))
    rows, preds = [], {}
    for p in ("last", "mean"):
        r, pr = fit_cell(("linear", 1, p), LINEAR, split, by_id, targets, features, n_boot=100, seed=0, n_seeds=1)
        rows.append(r)
        preds[("linear", p)] = pr
    df = pd.DataFrame(rows)
    diffs = pooling_table.paired_differences(df, preds, reference_head="linear", n_boot=100, seed=0,
                                             pairs=[["last", "mean"], ["attn", "mean"]])  # attn absent: no row
    pair = diffs[diffs["kind"] == "pair"]
    assert list(pair["pooling"]) == ["last − mean"]
    lin = df.set_index("pooling")["spearman"]
    assert pair["diff"].iloc[0] == pytest.approx(lin["last"] - lin["mean"]) and pair["ci_low"].iloc[0] > 0
    md = pooling_table.render(df, diffs, model="m", data="d", layer=1, reference_head="linear")
    assert "**One pooling against another, same head**" in md and "| last − mean |" in md


TOKENS = ["features.pools=[last,mean]", "features.fused=[]"]


def test_the_stages_write_the_choice_that_the_pooling_table_reads(trace_run):  # noqa: F811
    from lengthpred.stages.readout_sweep import sweep_layers, sweep_poolings

    cfg = trace_run("linear", *TOKENS, "sweep=layer_curve", "sweep.layers=[1,2]", "sweep.heads=[linear]",
                    "sweep.n_boot=20")
    df, choice = sweep_layers(cfg, cfg.paths.output_dir)
    out = cfg.paths.output_dir
    for f in ("layers.csv", "layers.md", "layer_choice.json", "layer_curves.png"):
        assert (tmp := __import__("pathlib").Path(out) / f).is_file(), tmp
    chosen = choice["linear"]["layer"]
    best = df.loc[df["val_spearman_seed_mean"].astype(float).idxmax(), "layer"]
    assert chosen == best
    cfg2 = trace_run("linear", *TOKENS, "sweep=pooling_heads", "sweep.heads=[linear]", "sweep.poolings=[last,mean]",
                     f"sweep.layer_choice={out}/layer_choice.json", "sweep.n_boot=20")
    rows, diffs = sweep_poolings(cfg2, cfg2.paths.output_dir)
    assert set(rows["layer"]) == {chosen} and set(rows["pooling"]) == {"last", "mean"}
    assert list(diffs["kind"]) == ["pooling"]
    cfg3 = trace_run("linear", *TOKENS, "sweep=pooling_heads", "sweep.heads=[linear]", "sweep.reference_head=probe")
    with pytest.raises(ConfigError, match="reference_head"):
        sweep_poolings(cfg3, cfg3.paths.output_dir)


def test_a_late_layer_attention_form_is_one_override_and_extracts_only_what_the_table_reads(trace_run):  # noqa: F811
    from lengthpred.stages.readout_sweep import sweep_poolings

    cfg = trace_run("linear", "features.pools=[last,attn]", "features.fused=[]", "features.attn_layers=[1]",
                    "sweep=pooling_heads", "sweep.heads=[linear]", "sweep.poolings=[last,attn]", "sweep.layers=[2]",
                    "sweep.n_boot=20")
    rows, diffs = sweep_poolings(cfg, cfg.paths.output_dir)
    assert list(rows["pooling"]) == ["last", "attn"] and list(diffs["pooling"]) == ["attn"]
    from lengthpred.data import load_prompts
    from lengthpred.stages.features import ensure_features

    fs = ensure_features(cfg, load_prompts(cfg.data), need=[(2, "last"), (2, "attn")])
    assert fs.manifest["attn_layers"] == [1] and fs.manifest["layers"] == [2]  # a reduced store of its own
