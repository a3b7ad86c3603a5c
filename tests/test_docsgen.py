"""The docs generator (docsgen/): tables round-trip, numbers parse with their intervals, a missing or malformed
results file stops the build in one line naming it and the page, and nothing is written then."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from docsgen import mdtable
from docsgen.build import build
from docsgen.errors import DocsInputError
from docsgen.numbers import parse_cell, pct_interval
from docsgen.results import Results
from lengthpred.paths import REPO_ROOT

T1 = "docs/results/data/t1-in-domain/bench_T1.csv"


def test_a_markdown_table_round_trips_through_its_rows():
    lines = ["| head | Spearman ↑ | n |", "|---|---:|---:|", "| probe | 0.754 [0.701, 0.803] | 480 |",
             "| constant | undefined |  |"]
    t = mdtable.parse(lines)
    assert t.rows[1] == ["constant", "undefined", ""]
    again = mdtable.from_csv(t.to_csv(), t.align)
    assert mdtable.render(again) == "\n".join(lines)


def test_cells_parse_as_values_with_their_interval():
    s = parse_cell("0.754 [0.701, 0.803]")
    assert (s.value, s.lo, s.hi, s.decimals) == (0.754, 0.701, 0.803, 3) and s.excludes_zero()
    g = parse_cell("−28% [−42, −16]")
    assert g.percent and g.value == -28 and g.hi == -16 and g.excludes_zero()
    assert parse_cell("undefined") is None and parse_cell("—") is None
    assert pct_interval(0.3234, 0.13, 0.47) == "+32% [+13, +47]"


def _copy_tree(tmp_path: Path) -> Path:
    """The parts of the repository the renderer reads, copied (the tree is never touched by these tests)."""
    root = tmp_path / "repo"
    for d in ("docsgen", "docs", "scripts"):
        shutil.copytree(REPO_ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("README.md", "mkdocs.yml"):
        shutil.copy(REPO_ROOT / f, root / f)
    (root / "data/reference/smollm2-135m").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "data/reference/smollm2-135m/bench.jsonl", root / "data/reference/smollm2-135m/")
    (root / "conf").symlink_to((REPO_ROOT / "conf").resolve())
    return root


def test_a_missing_results_file_stops_the_build_in_one_line_and_writes_nothing(tmp_path):
    root = _copy_tree(tmp_path)
    (root / T1).unlink()
    readme = (root / "README.md").read_text()
    lines: list[str] = []
    assert build(root, log=lines.append, produce=False) == 2
    assert len(lines) == 1 and lines[0].startswith(f"docs: {T1}: missing (needed by ")
    assert (root / "README.md").read_text() == readme


def test_a_malformed_results_file_is_named_with_the_page_that_needs_it(tmp_path):
    root = _copy_tree(tmp_path)
    (root / T1).write_text("Domain,Head\nall,probe,0.7,extra\n")
    lines: list[str] = []
    assert build(root, log=lines.append, produce=False) == 2
    assert lines[0].startswith(f"docs: {T1}: ") and "needed by" in lines[0]


def test_a_cell_that_is_not_a_number_is_refused_not_printed():
    res = Results(REPO_ROOT, "README.md", overlay={T1: (REPO_ROOT / T1).read_text().replace("0.754 [", "n/a [")})
    from docsgen.pages.headline import t1_stat

    with pytest.raises(DocsInputError, match="bench_T1.csv: probe Spearman ↑: 'n/a"):
        t1_stat(res, "probe")


def test_the_committed_pages_are_what_make_docs_renders():
    """README.md and docs/ match their templates and the committed rows (producers not rerun: their keys are
    make docs-check's business)."""
    lines: list[str] = []
    assert build(REPO_ROOT, check=True, log=lines.append, produce=False, derived_pages=False) == 0, "\n".join(lines)


def test_the_serving_generator_reproduces_the_committed_rows():
    """The rows the README's serving numbers are rendered from are what the generator computes from the committed
    run folders now (paired gains, exact p, median per repeat; seconds, no replay)."""
    from docsgen.pages.serving import FOLDER_INFO, GAINS, run_gains

    made = run_gains(REPO_ROOT)
    for path in (GAINS, FOLDER_INFO):
        assert made[path] == (REPO_ROOT / path).read_text(encoding="utf-8"), f"{path}: run make docs"


def test_the_lora_verdict_waits_for_every_seed_and_reads_the_paired_interval():
    from docsgen.pages.lora_t1 import PAIRS, T1_LORA, lora_vs_probe_verdict

    head = "Domain,Head,Spearman ↑,Spearman over seeds ↑,Noise ceiling (estimate) ↑,MAE of median (tokens) ↓,n\n"
    pairs = ("head,seeds,metric (prediction scored),seed mean ± sd,difference vs probe [95% CI],p (one-sided)\n"
             "probe,3,spearman (y_pred),0.759 ± 0.005,(reference),\n"
             'lora,3,spearman (y_pred),0.75 ± 0.01,"-0.009 [-0.020, 0.003]",0.9\n'
             "probe,3,mae (median),72.0 ± 1.3,(reference),\n"
             'lora,3,mae (median),80.0 ± 1.0,"8.0 [4.0, 12.0]",1.000\n')
    one_seed = head + 'all,lora,"0.742 [0.687, 0.791]",—,"0.886 [0.861, 0.906]","81.0 [74.6, 87.5]",480\n'
    assert lora_vs_probe_verdict(Results(REPO_ROOT, "x", overlay={T1_LORA: one_seed, PAIRS: pairs})) == ""
    every = one_seed.replace(",—,", ",0.745 ± 0.004 (3),")
    verdict = lora_vs_probe_verdict(Results(REPO_ROOT, "x", overlay={T1_LORA: every, PAIRS: pairs}))
    assert verdict.startswith("With its 3 seeds, lora is level with and errs more than the probe")
    better = pairs.replace('"-0.009 [-0.020, 0.003]"', '"0.020 [0.010, 0.030]"').replace('"8.0 [4.0, 12.0]"',
                                                                                     '"-3.0 [-5.0, -1.0]"')
    verdict = lora_vs_probe_verdict(Results(REPO_ROOT, "x", overlay={T1_LORA: every, PAIRS: better}))
    assert "lora ranks better than and errs less than the probe" in verdict
    assert "fitted each on 300 train prompts where the probe's used all 1,440" in verdict  # the committed fit record


def test_the_gap_sentence_says_reached_only_where_every_interval_says_so():
    from docsgen.pages.gap import _DATA, REACH, gap_summary, gap_trend

    head = "head,seeds,test Spearman [95% CI],sd over seeds,share of the ceiling [95% CI],0.90 of the ceiling\n"
    rows = {"not reached": 'a,3,"0.7 [0.6, 0.8]",0.01,"0.80 [0.75, 0.85]",not reached\n',
            "not shown either way": 'b,3,"0.75 [0.7, 0.8]",0.01,"0.86 [0.80, 0.91]",not shown either way\n',
            "reached": 'c,3,"0.85 [0.8, 0.9]",0.01,"0.95 [0.91, 0.99]",reached\n'}

    def opening(*kinds: str) -> str:
        return gap_summary(Results(REPO_ROOT, "x", overlay={_DATA + REACH: head + "".join(rows[k] for k in kinds)}))

    assert opening("not reached").startswith("No head reaches 0.90 of the test noise ceiling")
    assert opening("not reached", "not shown either way").startswith("No head is shown to reach 0.90")
    assert opening("not shown either way", "reached").startswith("A head reaches 0.90")
    assert "b 0.86 [0.80, 0.91] of the ceiling (not shown either way)" in opening("not shown either way")
    from docsgen.pages.gap import TREND

    trend = ("head,noise ceiling (test),target,asymptote a [95% CI],gain over the last doubling [95% CI],"
             "train prompts to reach the target [95% CI],replicates that reach it\n"
             'a,"0.886 [0.861, 0.906]",0.798,"0.754 [0.7, 0.9]","+0.004 [-0.004, +0.012]","never [3,477, never]",12%\n'
             'b,"0.886 [0.861, 0.906]",0.798,"0.842 [0.7, 1.0]","{gain}","14,590 [1,253, never]",71%\n')

    def ending(gain: str) -> str:
        return gap_summary(Results(REPO_ROOT, "x", overlay={_DATA + REACH: head + rows["not reached"],
                                                            _DATA + TREND: trend.format(gain=gain)}))

    assert ending("+0.012 [-0.002, +0.026]").endswith(
        "No curve is shown to be still rising (every last doubling's interval includes zero or lies below it), so the bench trace "
        "was not extended.")
    assert ending("+0.020 [+0.004, +0.036]").endswith(
        "b's curve is still rising (its last doubling's interval lies above zero): a longer bench trace "
        "(`make bench-trace` resumes it) would say more.")
    assert gap_trend(Results(REPO_ROOT, "x"), "probe")["share"] == "0.90"  # the ceiling cell read with or without its CI


def test_t7s_median_against_mean_is_counted_per_head_and_fit_from_the_rows():
    from docsgen.pages.castillo_median import T7, castillo_median_vs_mean, median_vs_mean

    head = ("Model,Predictor,Spearman ↑,Kendall τ ↑,MAE of the median (tokens) ↓,MAE of the mean ↓,"
            "Ceiling (mean of 10) ↑,Share of ceiling ↑,Over seeds (Spearman),n test\n")
    rows = ('a,linear,0.8,0.6,"100.0 [90.0, 110.0]","120.0 [100.0, 130.0]",0.99,81%,—,10\n'
            'b,linear,0.8,0.6,"80.0 [70.0, 90.0]","90.0 [80.0, 100.0]",0.99,81%,—,10\n'
            'a,linear (all-models fit),0.8,0.6,"100.0 [90.0, 110.0]","95.0 [80.0, 100.0]",0.99,81%,—,10\n'
            'b,linear (all-models fit),0.8,0.6,"100.0 [90.0, 110.0]","105.0 [80.0, 100.0]",0.99,81%,—,10\n'
            "a,egtp,0.8,0.6,100.0,,0.99,81%,—,10\n")
    res = Results(REPO_ROOT, "x", overlay={T7: head + rows})
    df = median_vs_mean(res).set_index(["head", "fit"])
    own = df.loc[("linear", "own fit")]
    assert (own.models, own.mae_median, own.mae_mean, own.lo, own.hi, own.lower) == (2, 90.0, 105.0, -20.0, -10.0, 2)
    assert df.loc[("linear", "all-models fit")].lower == 1
    assert "egtp" not in df.index.get_level_values("head")  # a head without a mean is not compared
    assert "| linear | own fit | 2 | 90.0 | 105.0 | −15.0 (−20.0 … −10.0) | −14.3% | 2 of 2 |" in \
        castillo_median_vs_mean(res)
    with pytest.raises(DocsInputError, match="no predictor has both"):
        median_vs_mean(Results(REPO_ROOT, "x", overlay={T7: head + rows.splitlines(True)[-1]}))


def test_t7s_split_paragraph_reads_the_runs_record_and_names_a_missing_block():
    import json

    from docsgen.pages.castillo_split import SUMMARY, castillo_split

    rec = {"split_sizes": {"train": 525, "val": 214, "test": 311},
           "near_duplicates": {"rule": {"ngram": 5, "threshold": 0.5}, "groups_over_one": 19, "prompts_in_them": 45,
                               "test_with_twin_at_0.5": [], "test_with_twin_at_0.94": []},
           "truncation": {"max_prompt_tokens": 512, "Apps": {"prompts": 150, "truncated": 100},
                          "Dolly": {"prompts": 150, "truncated": 57}}}
    text = castillo_split(Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps(rec)}))
    assert "525 train, 214 validation and 311 test prompts" in text
    assert "word 5-grams reach Jaccard 0.5" in text and "19 groups of two or more, 45 prompts" in text
    assert "at Jaccard ≥ 0.5: none; at Jaccard ≥ 0.94: none" in text and "157 prompts longer than 512 tokens" in text
    rec["near_duplicates"]["test_with_twin_at_0.5"] = ["Mbpp/1", "Apps/7"]
    assert "at Jaccard ≥ 0.5: 2; at Jaccard ≥ 0.94: none" in castillo_split(
        Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps(rec)}))
    rec["truncation"]["max_prompt_tokens"] = None
    rec["near_duplicates"] = {"rule": None}
    text = castillo_split(Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps(rec)}))
    assert text.endswith("(`data.near_duplicates: null`). No prompt is cut for the prefill "
                         "(`features.max_prompt_tokens: null`).")
    rec["split_sizes"] = None
    with pytest.raises(DocsInputError, match="not shaped as a castillo run writes it"):
        castillo_split(Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps(rec)}))
    del rec["near_duplicates"]
    with pytest.raises(DocsInputError, match="no 'near_duplicates'"):
        castillo_split(Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps(rec)}))


def test_t7s_pairs_sentence_counts_which_side_each_interval_favours():
    from docsgen.pages.castillo_pairs import PAIRS, castillo_pairs_sentence

    head = ("Head,Reference,Fit,Model,\"Metric (prediction scored: head, reference)\",Head's seeds,"
            "Head (seed mean ± sd),Reference's seeds,Reference (seed mean ± sd),Head − reference [95% CI],"
            "\"p (one-sided, bootstrap)\",n test\n")
    rows = ('lora,probe,own fit,m2,too few shared test prompts (3),,,,,,,3\n'  # a note row first: no seeds
            'lora,probe,all-models fit,m1,"Spearman (y_pred, y_pred)",1,0.70,3,0.65 ± 0.01,"0.050 [0.010, 0.090]",0.01,300\n'
            'lora,probe,all-models fit,m2,"Spearman (y_pred, y_pred)",1,0.60,3,0.65 ± 0.01,"−0.050 [−0.090, −0.010]",0.99,300\n'
            'lora,probe,all-models fit,m3,"Spearman (y_pred, y_pred)",1,0.66,3,0.65 ± 0.01,"0.010 [−0.020, 0.040]",0.3,300\n'
            'lora,probe,all-models fit,m1,"MAE (tokens) (median, median)",1,100.0,3,110.0 ± 1.0,"−10.0 [−15.0, −5.0]",0.001,300\n'
            'lora,probe,all-models fit,m2,"MAE (tokens) (median, median)",1,100.0,3,90.0 ± 1.0,"10.0 [5.0, 15.0]",0.99,300\n'
            'lora,probe,own fit,m1,"Spearman (y_pred, y_pred)",1,0.70,3,0.65 ± 0.01,"0.050 [−0.010, 0.090]",0.06,300\n')
    text = castillo_pairs_sentence(Results(REPO_ROOT, "x", overlay={PAIRS: head + rows}))
    assert text.startswith("lora against probe, paired on the same test prompts (lora: 1 seed, probe: 3 seeds;")
    assert "all-models fit, Spearman: the interval favours lora on 1 of 3 models, probe on 1, neither on 1" in text
    assert "all-models fit, MAE: the interval favours lora on 1 of 2 models, probe on 1, neither on 0" in text
    assert "own fit, Spearman on m1: +0.050 [−0.010, +0.090]" in text
    with pytest.raises(DocsInputError, match="no row with a difference"):
        castillo_pairs_sentence(Results(REPO_ROOT, "x", overlay={PAIRS: head + rows.splitlines(True)[0]}))


def test_the_readme_layer_sentence_reads_validation_only():
    from docsgen.pages.layer_choice import CHOSEN, PER_LAYER, layer_choice_sentence

    chosen = ("Head,Pooling,Layers swept,Chosen layer,Val Spearman\n"
              "linear,last,31,18,0.785\nprobe,last,31,20,0.790\n")
    per = ("layer,linear val,linear test,probe val,probe test\n"
           '18,0.785,"0.732 [0.680, 0.780]",0.780,"0.7 [0.6, 0.8]"\n'
           '20,0.779,"0.747 [0.696, 0.793]",0.790,"0.75 [0.7, 0.8]"\n')
    text = layer_choice_sentence(Results(REPO_ROOT, "x", overlay={CHOSEN: chosen, PER_LAYER: per}))
    assert text == ("validation would choose layer 18 for the linear readout (validation Spearman 0.785 against "
                    "0.779 at 20) and layer 20 for the probe too (validation Spearman 0.790)")
    assert "0.732" not in text  # no test score beside the choice


def test_the_gap_noise_sentence_reads_the_committed_table_shape():
    from docsgen.pages.gap import _DATA, NOISE, gap_noise

    head = ("prompts,n,share of test,with a capped sample,sample spread (log) [95% CI],standard error of the target "
            "(log),median abs log error,error within 2 SE of their own target\n")
    rows = ('every head off by > 2×,57,0.119,0.23,"0.36 [0.29, 0.57]",0.21,1.00,0.19\n'
            'the rest,423,0.881,0.48,"0.39 [0.36, 0.46]",0.23,0.24,0.67\n')
    text = gap_noise(Results(REPO_ROOT, "x", overlay={_DATA + NOISE: head + rows}))
    assert text.startswith("Of the prompts every head gets wrong, 19% have an error within 2 standard errors")
    empty = head + "every head off by > 2×,0,0,—,—,—,—,—\n" + rows.splitlines(True)[1]
    assert gap_noise(Results(REPO_ROOT, "x", overlay={_DATA + NOISE: empty})) == (
        "No test prompt is missed by every head.")


def test_the_finetuned_fits_sentence_reads_the_runs_fit_records():
    import json

    from docsgen.pages.castillo_split import SUMMARY, castillo_finetuned_fits

    def fit(head, model, seeds):
        return {"head": head, "fit": model, "n_seeds": seeds, "status": "fitted"}

    every = ["all-models", "meta-llama--Llama-3.1-8B-Instruct", "Qwen--Qwen2.5-7B-Instruct"]
    fits = [fit("probe", m, 3) for m in every] + [fit(h, m, 1) for h in ("lora", "proxy_reg") for m in every[:2]]
    text = castillo_finetuned_fits(Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps({"fits": fits})}))
    assert text == "on the mean over models and on Llama-3.1-8B-Instruct's own lengths, one seed each"
    fits = [f | {"n_seeds": 2} if f["head"] == "proxy_reg" else f for f in fits] + [fit("lora", every[2], 1)]
    text = castillo_finetuned_fits(Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps({"fits": fits})}))
    assert text.endswith("own lengths, 2 seeds")  # lora now fitted on every model: only proxy_reg's seeds count
    with pytest.raises(DocsInputError, match="no head fitted on only some models"):
        castillo_finetuned_fits(Results(REPO_ROOT, "x", overlay={SUMMARY: json.dumps({"fits": fits[:3]})}))


def test_the_store_findings_follow_each_shapes_record():
    import json

    from docsgen.pages.scale import STORE, STORE_DEFAULT, STORE_LLAMA, store_findings

    recs = {f: json.loads((REPO_ROOT / f).read_text()) for f in (STORE, STORE_DEFAULT, STORE_LLAMA)}

    def findings(**changes) -> str:
        overlay = {}
        for f, rec in recs.items():
            rec = json.loads(json.dumps(rec))
            rec["result"].update(changes.get(f, {}))
            overlay[f] = json.dumps(rec)
        return store_findings(Results(REPO_ROOT, "x", overlay=overlay))

    text = findings(**{STORE: {"verification_pct_of_load parts": 1.3, "stat_only_pct_of_load parts": 0.8},
                       STORE_DEFAULT: {"verification_pct_of_load parts": 0.5, "speedup": 30.0},
                       STORE_LLAMA: {"verification_pct_of_load parts": 0.6, "speedup": 3.5,
                                     "float32_conversion_s (both layouts)": 0.04}})
    assert "SmolLM2-135M's default feature set (279 columns of d=576 a part, with a token-level file): 0.50%" in text
    assert "It is not for a narrow store" in text and "1.30%" in text and "leaving 0.20% for the rest" in text
    assert "It makes it 3.5x faster for Llama-3.1-8B's default set" in text and "(0.0400 s)" in text
    text = findings(**{STORE: {"verification_pct_of_load parts": 2.0, "stat_only_pct_of_load parts": 1.2}})
    assert "the stats alone exceed the goal" in text
    assert "It is not" not in findings(**{STORE: {"verification_pct_of_load parts": 0.9}})
