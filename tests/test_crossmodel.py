"""Cross-model CASTILLO experiment (lengthpred.crossmodel): union, split, targets, ceilings, scoring.

Synthetic CASTILLO folders only; the end-to-end run with the tiny model is in test_crossmodel_run.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lengthpred.crossmodel.ceilings import POOLED, ceiling_table
from lengthpred.crossmodel.scoring import score_all, transfer_matrix
from lengthpred.crossmodel.split import coverage, coverage_warnings, sample_per_dataset, stratified_split
from lengthpred.crossmodel.table import ALL_MODELS, LengthTable, short_model
from lengthpred.crossmodel.union import read_union
from lengthpred.errors import ConfigError, DataError
from lengthpred.metrics import spearman_brown

L31, L1B, G4B = ("meta-llama--Llama-3.1-8B-Instruct", "meta-llama--Llama-3.2-1B-Instruct", "google--gemma-3-4b-it")
MODELS = [L31, L1B, G4B]


def prompt(ds: str, i: int) -> str:
    return f"{ds} task {i}: " + "word " * (i % 7)


def base_length(ds: str, i: int) -> float:
    return {"Alpaca": 300.0, "Apps": 900.0, "Mbpp": 200.0}[ds] * (1 + (i % 7) / 3)


def write_castillo(root: Path, n: int = 30, *, skip: tuple[tuple[str, str], ...] = (("Apps", L1B),),
                   noise: float = 0.05, seed: int = 0) -> Path:
    """<root>/<Dataset>/<model>.jsonl; lengths ∝ a per-prompt base (the same ranking for every model) × noise;
    `skip`: (dataset, model) files not written."""
    rng = np.random.default_rng(seed)
    for ds in ("Alpaca", "Apps", "Mbpp"):
        (root / ds).mkdir(parents=True, exist_ok=True)
        for k, m in enumerate(MODELS):
            if (ds, m) in skip:
                continue
            with (root / ds / f"{m}.jsonl").open("w") as f:
                for i in range(n):
                    sizes = np.round(base_length(ds, i) * (1 + 0.2 * k) * rng.lognormal(0, noise, 10)).astype(int)
                    f.write(json.dumps({"prompt_text": prompt(ds, i), "output_sizes": sizes.tolist(),
                                        "dataset": ds, "model": m}) + "\n")
    return root


@pytest.fixture
def castillo(tmp_path: Path) -> Path:
    return write_castillo(tmp_path / "validate")


def read(root: Path, **kw):
    return read_union(root, models=MODELS, datasets=["Alpaca", "Apps", "Mbpp"], cap=15001, **kw)


# --- union ---------------------------------------------------------------------------------------------
def test_union_has_one_id_per_prompt_whichever_model(castillo):
    u = read(castillo)
    assert len(u.records) == 90 and u.table.samples.shape == (90, 3, 10)
    assert u.report["per_dataset"] == {"Alpaca": 30, "Apps": 30, "Mbpp": 30}
    apps = [r["id"] for r in u.records if r["dataset"] == "Apps"]
    assert not u.table.has(L1B, apps).any() and u.table.has(L31, apps).all()
    # the same id as the castillo:<model> registry sources give that prompt (source "castillo", read_trace)
    from lengthpred.data.readers import BadInputLog
    from lengthpred.data.trace import read_trace

    files = [castillo / ds / f"{L31}.jsonl" for ds in ("Alpaca", "Apps", "Mbpp")]
    via_source = {r["id"] for r in read_trace(files, "prompt_text", "output_sizes", BadInputLog(), source="castillo")}
    assert via_source == set(u.table.ids_with(L31, u.table.ids))


def test_missing_files_reported_by_design_or_as_missing(castillo):
    (castillo / "Mbpp" / f"{G4B}.jsonl").unlink()
    u = read(castillo)
    assert u.report["missing_by_design"] == [f"Apps/{L1B}"]  # CASTILLO itself lacks it
    assert u.report["missing"] == [f"Mbpp/{G4B}"]
    u2 = read_union(castillo, models=[L31, "acme--NoSuchModel"], datasets=["Alpaca", "Nope"])
    assert any("dataset Nope: no folder" in m for m in u2.report["missing"])
    assert any("acme--NoSuchModel: no file in any dataset" in m for m in u2.report["missing"])


def _append(path: Path, row: dict) -> int:
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, json.dumps(row)]) + "\n")
    return len(lines) + 1


def test_too_few_samples_names_file_line_and_field_or_is_counted(castillo):
    path = castillo / "Alpaca" / f"{L31}.jsonl"
    line = _append(path, {"prompt_text": "short sampled", "output_sizes": [1, 2, 3]})
    with pytest.raises(DataError, match=rf"{path}:{line}: too few samples: field 'output_sizes' has 3"):
        read(castillo)
    u = read(castillo, on_bad_input="skip")
    assert u.report["bad_input_skipped"] == {"too few samples": 1} and len(u.records) == 90


def test_empty_prompt_and_extra_samples(castillo):
    path = castillo / "Mbpp" / f"{G4B}.jsonl"
    line = _append(path, {"prompt_text": "   ", "output_sizes": list(range(10))})
    with pytest.raises(DataError, match=rf":{line}: empty prompt"):
        read(castillo)
    _append(castillo / "Alpaca" / f"{L31}.jsonl", {"prompt_text": "eleven", "output_sizes": list(range(11))})
    _append(castillo / "Alpaca" / f"{L31}.jsonl", {"prompt_text": "eleven", "output_sizes": list(range(10))})
    u = read(castillo, on_bad_input="skip")
    assert u.report["bad_input_skipped"] == {"empty prompt": 1}
    assert u.report["notes"] == {"rows with more than 10 samples (first 10 kept)": 1,
                                 "duplicate rows in one file (first kept)": 1}
    rid = next(r["id"] for r in u.records if r["messages"][0]["content"] == "eleven")
    assert u.table.per_sample(L31, [rid])[0].tolist() == list(range(10))


def test_no_usable_rows_and_bad_config(tmp_path):
    with pytest.raises(DataError, match="no CASTILLO validate folder"):
        read_union(tmp_path / "nowhere")
    (tmp_path / "v" / "Alpaca").mkdir(parents=True)
    with pytest.raises(DataError, match="no usable CASTILLO rows"):
        read_union(tmp_path / "v", models=[L31], datasets=["Alpaca"])
    with pytest.raises(ConfigError, match="n_samples"):
        read_union(tmp_path / "v", n_samples=1)


# --- table and targets --------------------------------------------------------------------------------
def test_targets_mean_of_samples_and_mean_over_models():
    s = np.full((2, 2, 3), np.nan)
    s[0, 0], s[0, 1], s[1, 0] = [1, 2, 3], [10, 20, 15001], [4, 4, 4]
    t = LengthTable(["a", "b"], ["m1", "m2"], s, cap=15001)
    assert t.target("m1", ["a", "b"]).tolist() == [2.0, 4.0]
    assert t.target(ALL_MODELS, ["a", "b"]).tolist() == [(2.0 + (30 + 15001) / 3) / 2, 4.0]  # b: m1 only
    assert t.capped_frac("m2", ["a"]).tolist() == [pytest.approx(1 / 3)]
    assert t.ids_with("m2", ["b", "a"]) == ["a"] and t.ids_with(ALL_MODELS, ["b", "a"]) == ["b", "a"]
    with pytest.raises(DataError, match="some of the 2 prompts have no samples"):
        t.target("m2", ["a", "b"])
    with pytest.raises(DataError, match="no model 'm3'"):
        t.has("m3", ["a"])
    assert short_model(L31) == "Llama-3.1-8B-Instruct"


def test_table_save_load_roundtrip(tmp_path):
    t = LengthTable(["a"], ["m"], np.ones((1, 1, 2)), cap=None)
    t2 = LengthTable.load(t.save(tmp_path / "t.npz"))
    assert t2.ids == ["a"] and t2.models == ["m"] and t2.cap is None and np.array_equal(t2.samples, t.samples)


# --- split ---------------------------------------------------------------------------------------------
def test_split_by_prompt_stratified_and_shared_by_every_model(castillo):
    u = read(castillo)
    sp = stratified_split(u.table.ids, u.dataset_of, {"train": 0.5, "val": 0.2, "test": 0.3}, seed=0)
    parts = [set(v) for v in sp.values()]
    assert sum(map(len, parts)) == 90 and not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    for ds in ("Alpaca", "Apps", "Mbpp"):
        assert [sum(u.dataset_of[i] == ds for i in sp[k]) for k in ("train", "val", "test")] == [15, 6, 9]
    # each model's train/test are subsets of the one split: no prompt in train for one model, test for another
    for m in MODELS:
        assert not set(u.table.ids_with(m, sp["train"])) & set(u.table.ids_with(m, sp["test"]))
    assert stratified_split(u.table.ids, u.dataset_of, {"train": 0.5, "val": 0.2, "test": 0.3}, seed=0) == sp
    with pytest.raises(ConfigError, match="summing to 1"):
        stratified_split(u.table.ids, u.dataset_of, {"train": 0.5, "test": 0.3}, seed=0)


def test_sample_per_dataset_caps_each_dataset(castillo):
    u = read(castillo)
    chosen = sample_per_dataset(u.table.ids, u.dataset_of, 7, seed=3)
    assert len(chosen) == 21 and {u.dataset_of[i] for i in chosen} == {"Alpaca", "Apps", "Mbpp"}
    assert chosen == sample_per_dataset(u.table.ids, u.dataset_of, 7, seed=3)
    assert sample_per_dataset(u.table.ids, u.dataset_of, None, seed=3) == sorted(u.table.ids)


def test_model_in_train_but_not_in_test_is_reported():
    s = np.full((4, 2, 3), np.nan)
    s[:, 0] = 1.0
    s[:2, 1] = 1.0  # m2 has only the two train prompts
    t = LengthTable(list("abcd"), ["m1", "m2"], s)
    sp = {"train": ["a", "b"], "val": [], "test": ["c", "d"]}
    cov = coverage(t, sp, dict.fromkeys("abcd", "Alpaca"))
    lines = coverage_warnings(cov, min_train=2, min_test=2)
    assert lines == ["m2: 2 train but 0 test prompts (< 2): not scored; its rows read 'no test prompts'"]


# --- ceilings --------------------------------------------------------------------------------------------
def test_ceiling_is_spearman_brown_of_pairwise_r_and_falls_with_noise(tmp_path):
    quiet = read(write_castillo(tmp_path / "q", noise=0.02))
    loud = read(write_castillo(tmp_path / "l", noise=1.5))
    cq = ceiling_table(quiet.table, quiet.table.ids, quiet.dataset_of)
    cl = ceiling_table(loud.table, loud.table.ids, loud.dataset_of, n_boot=200)
    row = cl[(cl["model"] == L31) & (cl["dataset"] == "Alpaca")].iloc[0]
    assert row["ceiling_mean_k"] == pytest.approx(np.sqrt(spearman_brown(row["ceiling_pairwise_r"], 10)))
    assert row["ceiling_mean_k_lo"] <= row["ceiling_mean_k"] <= row["ceiling_mean_k_hi"]
    q = cq.set_index(["model", "dataset"])["ceiling_loo"]
    lo = cl.set_index(["model", "dataset"])["ceiling_loo"]
    assert (q.drop((L1B, "Apps")) > 0.9).all() and (lo.drop((L1B, "Apps")) < q.drop((L1B, "Apps"))).all()
    assert np.isnan(q[(L1B, "Apps")]) and cq.set_index(["model", "dataset"]).loc[(L1B, "Apps"), "n"] == 0
    assert set(cq["dataset"]) == {"Alpaca", "Apps", "Mbpp", POOLED}


# --- scoring ---------------------------------------------------------------------------------------------
def test_scores_own_fit_transfer_and_missing_cells(castillo):
    u = read(castillo)
    test = sorted(u.table.ids)[::2]
    # an oracle for L31's lengths, and a fit that never ran
    preds = pd.DataFrame({"head": "oracle", "fit": L31, "id": test, "y_pred": u.table.target(L31, test)})
    fits = pd.DataFrame([{"head": "oracle", "fit": L31, "status": "fitted"},
                         {"head": "oracle", "fit": G4B, "status": "not fitted: 0 train prompts (< 20)"}])
    res = score_all(preds, fits, u.table, test, u.dataset_of, n_boot=100, min_test=5)
    own = res[(res.fit == L31) & (res.model == L31) & (res.dataset == POOLED)].set_index("metric")
    assert own.loc["spearman", "value"] == pytest.approx(1.0) and own.loc["mae", "value"] == 0.0
    assert own.loc["spearman", "ci_low"] <= 1.0 and own.loc["spearman", "n"] == 45
    # transfer to the other models: pooled point Spearman only; L1B lacks Apps, so fewer prompts
    tr = res[(res.fit == L31) & (res.model == L1B)]
    assert list(tr["dataset"]) == [POOLED] and list(tr["metric"]) == ["spearman"]
    assert tr["n"].iloc[0] == len(u.table.ids_with(L1B, test)) < 45
    assert tr["value"].iloc[0] > 0.9  # same per-prompt ranking for every model in the synthetic data
    gone = res[(res.fit == G4B)]
    assert len(gone) == 3 and set(gone["note"]) == {"not fitted: 0 train prompts (< 20)"}
    apps = res[(res.fit == L31) & (res.model == L31) & (res.dataset == "Apps")]
    assert set(apps["metric"]) == {"spearman", "kendall", "mae"}
    n_apps = sum(u.dataset_of[i] == "Apps" for i in test)
    few = score_all(preds, fits, u.table, test, u.dataset_of, n_boot=0, min_test=n_apps + 1)
    assert few[(few.fit == L31) & (few.model == L31) & (few.dataset == "Apps")]["note"].item() == \
        f"too few test prompts ({n_apps})"
    mat = transfer_matrix(res, "oracle", MODELS)
    assert list(mat.index) == [L31, G4B] and mat.loc[L31, L31] == pytest.approx(1.0)
    assert mat.loc[G4B].isna().all()  # a fit that did not run stays a row of n/a, not dropped


def test_constant_prediction_is_undefined_not_zero(castillo):
    u = read(castillo)
    test = sorted(u.table.ids)
    preds = pd.DataFrame({"head": "c", "fit": ALL_MODELS, "id": test, "y_pred": 100.0})
    fits = pd.DataFrame([{"head": "c", "fit": ALL_MODELS, "status": "fitted"}])
    res = score_all(preds, fits, u.table, test, u.dataset_of, n_boot=20)
    sp = res[(res.metric == "spearman") & (res.dataset == POOLED)]
    assert len(sp) == 3 and set(sp["note"]) == {"undefined"}


def test_the_fit_cache_keys_on_the_code_the_run_loaded_not_on_the_files_later(tmp_path, monkeypatch):
    """A source file edited while a run's features were extracted must not key fits made by the code loaded
    before: the code digest is read when the cache module is imported, not when a cache is built."""
    from lengthpred.crossmodel import fit_cache

    def edited() -> str:
        raise AssertionError("the fit cache read the source files again after the run started")

    monkeypatch.setattr(fit_cache, "code_digest", edited)
    cache = fit_cache.FitCache(tmp_path)
    assert cache.code == fit_cache.CODE_AT_IMPORT and len(cache.code) == 16
    assert fit_cache.FitCache(tmp_path, code="x").code == "x"
