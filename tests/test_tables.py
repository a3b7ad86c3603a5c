"""Tables from results files only: content, determinism (byte-identical), plots, and the Hydra scripts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lengthpred.eval import write_results
from lengthpred.eval.report import evaluate_run, make_tables
from lengthpred.paths import REPO_ROOT
from lengthpred.stages.provenance import provenance_of
from tests.conftest import compose_cfg
from tests.eval_fixtures import write_costs, write_experiment, write_sched


def _pipeline(root: Path, n_boot: int = 100) -> tuple[Path, dict]:
    write_experiment(root, n=25)
    res = evaluate_run(
        root,
        provenance_of(None),
        n_boot=n_boot,
        seed=3,
        reference=root / "reference.jsonl",
        splits_json=root / "splits.json",
    )
    results = write_results(res, root / "results.csv")
    out = make_tables(
        [results],
        root / "tables",
        sched=write_sched(root / "sched.csv"),
        costs=write_costs(root / "costs.json"),
        plot=False,
    )
    return results, out.tables


def test_same_inputs_and_seed_give_byte_identical_tables(tmp_path):
    r1, t1 = _pipeline(tmp_path / "a")
    r2, t2 = _pipeline(tmp_path / "b")
    assert r1.read_bytes() == r2.read_bytes()
    assert sorted(t1) == ["T1", "T2", "T3", "T4", "T5", "T6"]
    for key in t1:
        for ext in ("md", "tex", "csv"):
            a = (tmp_path / "a" / "tables" / f"{key}.{ext}").read_bytes()
            assert a == (tmp_path / "b" / "tables" / f"{key}.{ext}").read_bytes(), (key, ext)


def test_table_contents(tmp_path):
    _, tables = _pipeline(tmp_path, n_boot=50)
    t1 = tables["T1"].to_markdown()
    assert "Spearman ↑" in t1 and "MAE of median (tokens) ↓" in t1 and "Noise ceiling (estimate) ↑" in t1
    assert "MAE of mean (tokens) ↓" in t1
    const = [ln for ln in t1.splitlines() if "| constant |" in ln]
    assert len(const) == 4 and all("| undefined |" in ln for ln in const)  # 3 domains + all
    body = [ln for ln in t1.splitlines() if ln.startswith("| ")]
    assert body[-1].startswith("| all | prompt_len |")  # the pooled rows come last
    assert "static" not in t1  # online heads go to T3, not T1
    t3 = tables["T3"]
    shifts = [row[1].value for row in t3.rows]
    assert shifts == sorted(shifts) and len(shifts) == 6
    names = [c.name for c in t3.columns]
    assert names[-1] == "rls@0.999 − static" and "Best" not in names and "Gain %" not in names
    assert all(row[-1].value == pytest.approx(row[3].value - row[2].value) for row in t3.rows)
    t5 = {(r[1], r[2], r[0].value): r for r in tables["T5"].rows}
    assert t5[("sjf", "linear", 0.5)][-2].value == pytest.approx(20.0)  # latency 0.8 vs FCFS 1.0
    assert t5[("sjf", "linear", 0.5)][-1].value == pytest.approx(50.0)  # half the oracle's 40% gain
    csv = tables["T1"].to_csv().splitlines()
    assert csv[0].startswith("Domain,Head,Spearman,Spearman_ci_low,Spearman_ci_high")
    assert any(",undefined,undefined,undefined," in ln for ln in csv)
    tex = tables["T2"].to_latex()
    assert r"\toprule" in tex and r"$\uparrow$" in tex and "->" not in tex
    for t in tables.values():  # every symbol escaped: plain ASCII LaTeX
        assert t.to_latex().isascii(), t.key


def test_t5_uses_paired_gains_and_shows_missing_intervals_plainly(tmp_path):
    from lengthpred.eval.inputs import read_sched
    from lengthpred.eval.tables import table_t5

    sched = read_sched(write_sched(tmp_path / "sched_results.csv"))
    sched.loc[0, ["ci_low", "ci_high"]] = None  # one seed: no interval
    gains = pd.DataFrame(
        [
            {
                "policy": "sjf",
                "predictor": "linear",
                "load": 0.5,
                "metric": "gain_vs_fcfs",
                "value": 0.21,
                "ci_low": 0.15,
                "ci_high": 0.27,
            }
        ]
    )
    t5 = table_t5(sched, gains)
    md = t5.to_markdown()
    assert "+21.0% [+15.0%, +27.0%]" in md and "nan" not in md
    first = md.splitlines()[4]
    assert "| fcfs | - | 0.5 |" in first  # value shown without an interval


def test_plots_are_written(tmp_path):
    root = write_experiment(tmp_path, n=20)
    res = evaluate_run(root, provenance_of(None), n_boot=0, splits_json=root / "splits.json")
    results = write_results(res, root / "results.csv")
    curves = pd.DataFrame(
        [
            {"pair": p, "head": h, "n_updates": u, "test_spearman": np.tanh(u / 50) * s}
            for p in ("chat->math", "code->chat")
            for h, s in (("static", 0.1), ("rls@1", 0.7))
            for u in range(0, 60, 10)
        ]
    )
    curves.to_csv(root / "curves.csv", index=False)
    rng = np.random.default_rng(0)
    lat = pd.DataFrame(
        [
            {"policy": p, "predictor": "x", "load": ld, "latency": v}
            for p in ("fcfs", "sjf")
            for ld in (0.5, 0.9)
            for v in rng.exponential(0.05, 50)
        ]
    )
    lat.to_parquet(root / "lat.parquet")
    out = make_tables(
        [results],
        root / "tables",
        curves=[root / "curves.csv"],
        latencies=root / "lat.parquet",
        predictions_root=root / "runs",
    )
    assert set(out.plots) == {"cross_heatmap_linear", "adaptation_curves", "latency_cdf", "pred_vs_true"}
    for p in out.plots.values():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _per_target() -> pd.DataFrame:
    rows = []
    for t, d in (("chat", 0.12), ("math", -0.03), ("all", 0.045)):
        rows.append(
            {"target": t, "n_pairs": 6 if t != "all" else 12, "n_test": 80, "shift_mean": 0.4, "shift_min": 0.1,
             "shift_max": 0.9, "load": 0.7, "labels_seen_mean": 148.25, "labels_seen_median": 150.0,
             "labels_seen_ge10": 0.96,
             "in_flight_mean": 4.2, "base_test_spearman": 0.3, "rls_test_spearman": 0.3 + d,
             "rls_test_delta": d, "rls_test_delta_lo": d - 0.1, "rls_test_delta_hi": d + 0.1,
             "rls_stream_delta": d / 2, "rls_stream_delta_lo": d / 2 - 0.05, "rls_stream_delta_hi": d / 2 + 0.05,
             "mean_oracle_test_delta": d + 0.01, "mean_oracle_test_delta_lo": d - 0.09,
             "mean_oracle_test_delta_hi": d + 0.11, "forgetting": "1 (4), 0.99 (2)",
             "n_seeds": 10, "rls_test_delta_seed_sd": 0.06}
        )
    return pd.DataFrame(rows)


def test_t3_from_the_online_per_target_summary(tmp_path):
    from lengthpred.eval.tables import table_t3

    t3 = table_t3(pd.DataFrame(columns=["head", "split", "metric", "value"]), online_targets=_per_target())
    md = t3.to_markdown()
    assert [r[0] for r in t3.rows] == ["chat", "math", "all"]
    assert "| chat | 6 | 0.400 | 0.10 to 0.90 | 148.2 (150) | 0.960 | 4.2 | 0.300 | 0.420 | 0.120 [0.020, 0.220] |" in md
    assert "load 0.70" in md and "Gain" not in md and "Best" not in md
    assert "| 0.060 |" in md and "sd over seeds (test)" in md and "over 10 stream seed(s)" in md
    assert "resamples the target's prompts" in md and "stream seeds with replacement" in md
    assert t3.to_latex().isascii()


def test_make_tables_reads_the_online_run_next_to_its_curves(tmp_path):
    root = write_experiment(tmp_path, n=20)
    res = evaluate_run(root, provenance_of(None), n_boot=0, splits_json=root / "splits.json")
    results = write_results(res, root / "results.csv")
    run = root / "adapt"
    run.mkdir()
    _per_target().to_csv(run / "per_target.csv", index=False)
    pd.DataFrame(
        [
            {"pair": p, "head": h, "n_updates": u, "test_spearman": 0.3 + 0.001 * u * (h != "static")}
            for p in ("chat->math", "code->math", "qa->math")
            for h in ("static", "rls@val")
            for u in range(0, 60, 10)
        ]
    ).to_csv(run / "curves.csv", index=False)
    pd.DataFrame(
        [
            {"pair": f"{s}->math", "source": s, "target": "math", "head": h, "window_start": w,
             "labels_seen": 10.0 + 5 * w, "stream_spearman_delta": 0.0 if h == "static" else 0.01 * w}
            for s in ("chat", "code", "qa")
            for h in ("static", "rls@val")
            for w in range(8)
        ]
    ).to_csv(run / "stream_curves.csv", index=False)
    out = make_tables([results], root / "tables", curves=[run / "curves.csv"])
    assert out.tables["T3"].title == "Online adaptation by target domain"
    assert {"adaptation_summary", "adaptation_by_target"} <= set(out.plots)
    assert "adaptation_curves" not in out.plots


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_scripts_evaluate_then_make_tables(tmp_path, capsys):
    root = write_experiment(tmp_path / "exp", n=20)
    (root / "sched").mkdir()
    write_sched(root / "sched" / "sched_results.csv")
    write_costs(root / "costs.json")
    cfg = compose_cfg(
        [
            f"eval.experiment_dir={root}",
            f"eval.reference={root}/reference.jsonl",
            f"eval.splits_json={root}/splits.json",
            "eval.n_boot=50",
            "eval.plots=false",
        ],
        tmp_path,
    )
    _script("evaluate").main(cfg)
    assert (root / "results.csv").is_file()
    _script("make_tables").main(cfg)
    out = capsys.readouterr().out
    assert "**T1. In-domain" in out and "**T3. Online adaptation" in out and "**T5." not in out
    assert sorted(p.name for p in (root / "tables").glob("*.md")) == [f"T{i}.md" for i in range(1, 7)]


def test_t6_costs_merge_results_online_summary_and_costs_file(tmp_path):
    from lengthpred.eval.inputs import read_costs
    from lengthpred.eval.tables import assemble_costs, table_t6

    results = pd.DataFrame(
        [{"head": "linear", "split": "indomain/a/test", "metric": "n_parameters", "value": 577.0}]
    )
    summary = pd.DataFrame({"pair": ["a->b", "b->a"], "head": ["rls@1.0"] * 2, "update_ms": [0.2, 0.4]})
    costs = assemble_costs(results, read_costs(write_costs(tmp_path / "costs.json")), summary)
    by_head = costs.set_index("head")
    assert (
        by_head.at["linear", "extraction_overhead_pct"] == 8.0 and by_head.at["linear", "n_parameters"] == 577
    )
    assert by_head.at["rls@1.0", "update_latency_ms"] == pytest.approx(0.3)
    md = table_t6(costs).to_markdown()
    assert "Update latency (ms) ↓" in md and "| rls@1.0 | — | — | — | 0.300 |" in md
