"""experiment=castillo end to end on a synthetic CASTILLO folder with the tiny random-weight model."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from lengthpred.errors import ConfigError
from tests.conftest import compose_cfg
from tests.test_crossmodel import G4B, L1B, L31, MODELS, write_castillo

HEADS = "[constant,prompt_len,domain_median,linear,egtp]"


def castillo_cfg(tmp_path, *extra: str):
    root = write_castillo(tmp_path / "validate", n=24)
    return compose_cfg([
        "experiment=castillo", "model=tiny", f"data.root={root}", f"data.models=[{','.join(MODELS)}]",
        "data.datasets=[Alpaca,Apps,Mbpp]", "data.per_dataset=null", f"paths.data_dir={tmp_path / 'data'}",
        "features.layers=[2]", f"crossmodel.heads={HEADS}", "crossmodel.proxy_heads=[]",
        "crossmodel.transfer_heads=[linear,egtp]", "crossmodel.pairs=[[egtp,linear]]", "crossmodel.n_boot=50", "crossmodel.min_train=5",
        "crossmodel.min_test=3", f"crossmodel.docs_dir={tmp_path / 'docs'}",
        "+crossmodel.head_overrides.linear.layer=2", "+crossmodel.head_overrides.egtp.layer=2",
        "+crossmodel.head_overrides.egtp.params.epochs=2", "+crossmodel.head_overrides.egtp.select={}",
        *extra], tmp_path / "run")


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model, tokenizer):
    from lengthpred.stages.castillo import run_castillo

    tmp = tmp_path_factory.mktemp("castillo")
    cfg = castillo_cfg(tmp)
    summary = run_castillo(cfg, cfg.paths.output_dir, model=tiny_model, tokenizer=tokenizer)
    return tmp, cfg, summary


def test_one_prefill_per_prompt_serves_every_model(run):
    from lengthpred.features import load_features

    tmp, cfg, s = run
    stores = list((tmp / "data" / "features" / "tiny").iterdir())
    assert len(stores) == 1  # one feature store, whatever the number of models
    fs = load_features(stores[0])
    assert len(fs) == s["n_prompts_run"] == 72
    assert set(fs.names) == {"hs.L2.last", "hs.L2.entropy", "n_prompt_tokens", "entropy.mean"}
    assert s["feature_columns"] == ["hs.L2.entropy", "hs.L2.last"]


def test_every_head_fitted_per_model_and_on_the_mean_over_models(run):
    _, cfg, s = run
    fits = pd.read_csv(f"{cfg.paths.output_dir}/fits.csv")
    assert len(fits) == (5 + 1) * 4 and set(fits["fit"]) == {*MODELS, "all-models"}  # + prompt_len within
    within = (fits["head"] == "prompt_len (within dataset)") & (fits["fit"] == L1B)
    assert (fits.loc[~within, "status"] == "fitted").all()
    assert fits.loc[within, "status"].item() == "fitted (not in Apps: not fitted (0 train < 5))"  # no such file
    preds = pd.read_parquet(f"{cfg.paths.output_dir}/predictions.parquet")
    split = json.loads(open(f"{cfg.paths.output_dir}/split.json").read())
    got = preds.groupby(["head", "fit"])["id"].apply(set)
    no_apps = got.pop(("prompt_len (within dataset)", L1B))
    assert (got == set(split["test"])).all()
    lines = open(f"{cfg.paths.output_dir}/union/prompts.jsonl").read().splitlines()
    apps = {r["id"] for r in map(json.loads, lines) if r["dataset"] == "Apps"}
    assert no_apps == set(split["test"]) - apps != set(split["test"])


def test_results_tables_and_transfer_matrix(run):
    tmp, cfg, s = run
    out = cfg.paths.output_dir
    res = pd.read_csv(f"{out}/results.csv", keep_default_na=False)
    own = res[(res["fit"] == L31) & (res["model"] == L31) & (res["head"] == "linear")]
    assert set(own["dataset"]) == {"pooled", "Alpaca", "Apps", "Mbpp"}
    assert set(own["metric"]) == {"spearman", "kendall", "mae", "mae_mean"}  # MAE of the median, and of the mean
    preds = pd.read_parquet(f"{out}/predictions.parquet")
    lin = preds[(preds["head"] == "linear") & (preds["fit"] == L31)].set_index("id")
    assert {"y_pred_median", "y_pred_mean"} <= set(lin.columns) and (lin["y_pred_mean"] != lin["y_pred_median"]).all()
    pooled = own[own["dataset"] == "pooled"].set_index("metric")["value"].astype(float)
    assert pooled["mae"] != pooled["mae_mean"]  # two points (the Duan-smeared mean and the median), two scores
    const = res[(res["head"] == "constant") & (res["metric"] == "spearman") & (res["dataset"] == "pooled")]
    assert set(const["value"]) == {"undefined"}
    mat = pd.read_csv(f"{out}/transfer_linear.csv", index_col=0)
    assert list(mat.index) == ["Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct", "gemma-3-4b-it", "all-models"]
    assert list(mat.columns) == MODELS and mat.notna().all().all()
    t7 = open(f"{out}/tables/T7.md").read()
    assert "MAE of the median (tokens)" in t7 and "MAE of the mean" in t7
    assert t7.count("| Llama-3.2-1B-Instruct |") == 6 + 6  # own + all-models fit of each head
    assert "| Llama-3.2-1B-Instruct | prompt_len (pooled fit) |" in t7
    per_ds = open(f"{out}/tables/T7_datasets.md").read()
    assert not list((tmp / "docs").glob("*.md"))  # tables reach the docs as ingested rows, not copies
    header = per_ds.splitlines()[2]
    assert "prompt_len (within dataset)" in header and "pooled fit" not in header
    assert "| Llama-3.2-1B-Instruct | Apps | 0 | no file (not in CASTILLO) |" in per_ds
    assert (tmp / "docs" / "figures" / "castillo_transfer_linear.png").is_file()
    ceil = open(f"{out}/tables/T7_ceilings.md").read()
    assert "no file" in ceil and "| pooled |" in ceil
    assert set(s["seconds"]) >= {"union", "split", "tokens", "features", "fit heads", "scores", "total"}
    assert s["truncation"]["max_prompt_tokens"] == 512 and s["truncation"]["Alpaca"]["truncated"] == 0
    assert s["union"]["missing_by_design"] == [f"Apps/{L1B}"]


def test_two_heads_compared_paired_on_every_shared_fit_and_scored_model(run):
    """egtp (3 seeds) against linear (1): own fits on their own model, the all-models fit on every model; each
    head's value is what T7 scores for it on the same prompts (the seed mean where it has seeds)."""
    _, cfg, _ = run
    out = cfg.paths.output_dir
    pairs = pd.read_csv(f"{out}/pairs.csv")
    res = pd.read_csv(f"{out}/results.csv", keep_default_na=False)
    assert set(zip(pairs["fit"], pairs["model"], strict=True)) == {*((m, m) for m in MODELS),
                                                                     *(("all-models", m) for m in MODELS)}
    assert set(pairs["metric"]) == {"spearman", "mae"} and (pairs["n_seeds"] == 3).all()
    assert (pairs["reference_n_seeds"] == 1).all()

    def t7(head: str, fit: str, model: str, metric: str) -> float:
        r = res[(res["head"] == head) & (res["fit"] == fit) & (res["model"] == model) & (res["dataset"] == "pooled")
                & (res["metric"] == metric)]
        return float(r["value"].item())

    for r in pairs.itertuples():
        seed_metric = "spearman_seed_mean" if r.metric == "spearman" else "mae_seed_mean"
        assert r.seed_mean == pytest.approx(t7("egtp", r.fit, r.model, seed_metric), rel=1e-8)  # results.csv: 10 digits
        assert r.reference_mean == pytest.approx(t7("linear", r.fit, r.model, r.metric), rel=1e-8)
        assert r.diff == pytest.approx(r.seed_mean - r.reference_mean, abs=1e-9)
        assert r.ci_low <= r.diff <= r.ci_high and 0 <= r.p_value <= 1
    md = open(f"{out}/tables/T7_pairs.md").read()
    assert "| egtp | linear | all-models fit | gemma-3-4b-it | Spearman (y_pred, y_pred) | 3 |" in md


def test_a_rerun_reads_every_fit_from_the_cache_and_refits_only_what_changed(run, tiny_model, tokenizer):
    from lengthpred.stages.castillo import run_castillo

    tmp, cfg, s = run
    assert s["fits_from_cache"] == 0
    first = pd.read_parquet(f"{cfg.paths.output_dir}/predictions.parquet")
    again = run_castillo(cfg, tmp / "again", model=tiny_model, tokenizer=tokenizer)
    assert again["fits_from_cache"] == len(s["fits"]) == 24  # a new run folder: nothing keyed on the path
    pd.testing.assert_frame_equal(pd.read_parquet(tmp / "again" / "predictions.parquet"), first)
    fits = pd.read_csv(tmp / "again" / "fits.csv")
    assert fits["from_cache"].all()
    fresh = pd.read_csv(f"{cfg.paths.output_dir}/fits.csv")
    pd.testing.assert_frame_equal(fits.drop(columns="from_cache"), fresh.drop(columns="from_cache"))
    for f in ("results.csv", "tables/T7.md"):
        assert (tmp / "again" / f).read_text() == open(f"{cfg.paths.output_dir}/{f}").read()
    # the original fits' times (equal to the fresh run's, above), not the reads'; a fit under 5 ms (a constant on a
    # fast CPU) rounds to 0.00 s, so only some are positive
    secs = fits["fit_seconds"].dropna()
    assert (secs >= 0).all() and (secs > 0).any()
    # one unreadable entry and one changed setting: exactly those fits run again
    store = tmp / "data" / "fits" / "castillo"
    entries = sorted(store.glob("*.json"))
    assert len(entries) == 24
    next(e for e in entries if json.loads(e.read_text())["head"] == "constant").write_text("{broken")
    cfg2 = castillo_cfg(tmp, "+crossmodel.head_overrides.linear.select.alpha=[0.02,0.2,2,20,200,2000,20000,200000]")
    changed = run_castillo(cfg2, tmp / "changed", model=tiny_model, tokenizer=tokenizer)
    fits = pd.read_csv(tmp / "changed" / "fits.csv")
    refit = fits.loc[~fits["from_cache"], "head"].tolist()
    assert changed["fits_from_cache"] == 24 - 4 - 1 and sorted(refit) == ["constant", *["linear"] * 4]


def test_a_run_killed_mid_fits_resumes_from_its_finished_fits(tmp_path, tiny_model, tokenizer, monkeypatch):
    import lengthpred.crossmodel.fits as fits_mod
    from lengthpred.stages.castillo import run_castillo

    cfg = castillo_cfg(tmp_path)
    real, calls = fits_mod.fit_one, []

    def dies_on_the_eighth(*a, **k):
        calls.append(1)
        if len(calls) == 8:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(fits_mod, "fit_one", dies_on_the_eighth)
    with pytest.raises(KeyboardInterrupt):
        run_castillo(cfg, tmp_path / "killed", model=tiny_model, tokenizer=tokenizer)
    monkeypatch.setattr(fits_mod, "fit_one", real)
    s = run_castillo(cfg, tmp_path / "resumed", model=tiny_model, tokenizer=tokenizer)
    assert s["fits_from_cache"] == 7 and len(s["fits"]) == 24


def test_model_missing_from_test_is_reported_not_dropped(tmp_path, tiny_model, tokenizer):
    from lengthpred.stages.castillo import run_castillo

    # gemma has lengths for only two Alpaca prompts (they land in one split at most): no test prompts
    cfg = castillo_cfg(tmp_path, "crossmodel.heads=[constant]", "crossmodel.within_heads=[]", "crossmodel.transfer_heads=[]",
                       "crossmodel.primary_head=constant", "crossmodel.min_train=2")
    root = tmp_path / "validate"
    for ds in ("Apps", "Mbpp"):
        (root / ds / f"{G4B}.jsonl").unlink()
    lines = (root / "Alpaca" / f"{G4B}.jsonl").read_text().splitlines()
    (root / "Alpaca" / f"{G4B}.jsonl").write_text("\n".join(lines[:2]) + "\n")
    s = run_castillo(cfg, cfg.paths.output_dir, model=tiny_model, tokenizer=tokenizer)
    assert "gemma-3-4b-it: 2 train but 0 test prompts (< 3): not scored; its rows read 'no test prompts'" in \
        s["coverage_warnings"]
    assert s["union"]["missing"] == [f"Apps/{G4B}", f"Mbpp/{G4B}"]
    assert s["pairs"] == []  # [egtp, linear] is not fitted in this narrower run: left out, not refused
    assert not Path(f"{cfg.paths.output_dir}/tables/T7_pairs.md").exists()
    fits = pd.read_csv(f"{cfg.paths.output_dir}/fits.csv").set_index("fit")
    assert fits.loc[G4B, "status"] == "fitted" and fits.loc[G4B, "n_train"] == 2
    t7 = open(f"{cfg.paths.output_dir}/tables/T7.md").read()
    # its rows stay, saying why there is no score
    assert "| gemma-3-4b-it | constant | too few test prompts (0) |" in t7
    assert "| gemma-3-4b-it | constant (all-models fit) | too few test prompts (0) |" in t7


def test_refusals_before_any_work(tmp_path, tiny_model, tokenizer):
    from lengthpred.stages.castillo import run_castillo

    cfg = castillo_cfg(tmp_path, "crossmodel.proxy_targets=[acme--Nope]", "crossmodel.proxy_heads=[proxy_reg]")
    with pytest.raises(ConfigError, match="crossmodel.proxy_targets: unknown"):
        run_castillo(cfg, cfg.paths.output_dir, model=tiny_model, tokenizer=tokenizer)
    cfg = castillo_cfg(tmp_path, "crossmodel.primary_head=probe")
    with pytest.raises(ConfigError, match="primary_head='probe' is not among the heads"):
        run_castillo(cfg, cfg.paths.output_dir, model=tiny_model, tokenizer=tokenizer)
    for extra, said in ((["crossmodel.pairs=[[egtp,probes]]"], r"\['probes'\] is not a head"),
                        (["crossmodel.pairs=[[egtp]]"], "is not a pair of two different heads"),
                        (["crossmodel.proxy_heads=[proxy_reg]", f"crossmodel.proxy_targets=[{L31}]",
                          "crossmodel.fit_targets=[all-models]", "crossmodel.pairs=[[proxy_reg,linear]]"],
                         "proxy_reg and linear share no fit target")):
        cfg = castillo_cfg(tmp_path, *extra)
        with pytest.raises(ConfigError, match=said):
            run_castillo(cfg, cfg.paths.output_dir, model=tiny_model, tokenizer=tokenizer)
    cfg = castillo_cfg(tmp_path, "+crossmodel.head_overrides.linear.pooling=mean")
    with pytest.raises(Exception, match="pooling='mean' is not extracted"):
        run_castillo(cfg, cfg.paths.output_dir, model=tiny_model, tokenizer=tokenizer)
    assert not (tmp_path / "data" / "features").exists()


def test_experiment_config_for_the_embedded_model():
    from lengthpred.data.castillo import MODELS as ALL13
    from lengthpred.stages.castillo import feature_columns, head_specs

    cfg = compose_cfg(["experiment=castillo"])
    specs = {s.name: s for s in head_specs(cfg, list(ALL13))}
    assert feature_columns(cfg, list(specs.values())) == ["hs.L20.entropy", "hs.L20.last"]
    assert len(specs["linear"].targets) == 14 and specs["proxy_rank"].targets == ("all-models", L31)
    assert specs["egtp"].settings.n_seeds == specs["probe"].settings.n_seeds == 3  # seed spread shown in T7
    assert specs["proxy_reg"].settings.search.subsample == 128
    assert specs["proxy_reg"].settings.search.budget == specs["linear"].settings.search.budget == 8
    assert specs["linear"].settings.search.subsample is None  # only the proxies search on a subsample
    assert str(cfg.data.root).endswith("castillo/validate") and cfg.data.per_dataset == 150
