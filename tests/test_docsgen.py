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
