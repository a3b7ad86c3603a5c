"""The scale-out how-to's measured table (docs/how-to/gpu-and-slurm.md), rendered from the committed records of
benchmarks/bench_store_compaction.py and benchmarks/bench_torchrun_extract.py (their `--out` files under
docs/results/data/scale/), with the machine and its load beside the numbers."""

from __future__ import annotations

import statistics

from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

STORE = f"{DATA}/scale/store_compaction.json"
TORCHRUN = f"{DATA}/scale/torchrun_extract.json"  # `--threads 1`: one rank's worth of cores against two ranks
TORCHRUN_THREADS = f"{DATA}/scale/torchrun_extract_torch_threads.json"  # the one process on torch's own threads
TORCHRUN_LARGE = f"{DATA}/scale/torchrun_extract_2400.json"  # `--threads 1` on more prompts: the fixed start-up shrinks


def measured_where(rec: dict) -> str:
    """Where a benchmark record (lengthpred.machine.record) was measured: cores, CPU, load, date and commit."""
    m = rec["machine"]
    end = f" and {m['load_at_end']:.2f} at the end" if m.get("load_at_end") is not None else ""
    return (f"{m['cpus']} cores ({m['cpu'] or 'CPU'}), load average {m['load_at_start']:.2f} at the start{end}, "
            f"{rec['date']}, commit {rec['commit'] or '–'}")


def _secs(xs: list[float]) -> str:
    return ", ".join(f"{x:.0f}" for x in xs)


def _threads(rec: dict) -> str:
    n = rec["settings"].get("threads")
    return f"{n} thread" + ("s" if n != 1 else "") if n else "torch's threads (every core)"


def _torchrun_row(rec: dict) -> str:
    t = rec["result"]
    return (f"| `torchrun --nproc-per-node 2` extraction, tiny model, {t['prompts']:,} prompts, one process on "
            f"{_threads(rec)}, `bench_torchrun_extract.py` | whole command, per repetition: one process "
            f"{_secs(t['one_process_wall_s'])} s; two ranks (1 thread each) {_secs(t['torchrun_2_wall_s'])} s; "
            f"two-rank wall / half the one-process wall, medians: **{t['ratio (wall, goal <= 1.2)']:.2f}**; "
            f"extraction seconds alone {t['ratio (extraction only)']:.2f} (median one process "
            f"{statistics.median(t['one_process_extraction_s']):.0f} s) |")


@helper
def scale_measured(res: Results) -> str:
    store, run, run_all = res.json(STORE), res.json(TORCHRUN), res.json(TORCHRUN_THREADS)
    large = res.json(TORCHRUN_LARGE)
    s = store["result"]
    rows = [
        "| Benchmark | Result |", "|---|---|",
        f"| one column of {s['prompts']:,} prompts (d={s['d']}, float16, {s['parts']} parts of "
        f"{store['settings']['batch']}), `bench_store_compaction.py` | median of {store['settings']['reps']} loads: "
        f"{s['column_load_s parts']:.4f} s from the parts, {s['column_load_s compacted']:.4f} s compacted: "
        f"**{s['speedup']:.1f}x** (goal ≥ 10x) |",
        f"| per-load verification, same store (median of {store['settings']['reps']}) | compacted: "
        f"**{s['verification_pct_of_load compacted']:.2f}%** of a load; parts: "
        f"**{s['verification_pct_of_load parts']:.2f}%** of a parts load (one stat per part file, nothing read; "
        f"the {s['parts']} stats alone: {s['stat_only_pct_of_load parts']:.2f}%) (goal ≤ 1%: {_verdict(s)}); "
        "reading the verification record, which also lists the parts' ids for the load: "
        f"{s['record_read_pct_of_load parts']:.2f}% (parts), {s['record_read_pct_of_load compacted']:.2f}% "
        "(compacted) |",
        _torchrun_row(run), _torchrun_row(large), _torchrun_row(run_all),
    ]
    return ("Store: " + measured_where(store) + ".  \nTorchrun, one thread per process: " + measured_where(run)
            + f".  \nTorchrun at {large['result']['prompts']:,} prompts, one thread per process: "
            + measured_where(large)
            + ".  \nTorchrun, the one process on torch's threads: " + measured_where(run_all) + ".\n\n"
            + "\n".join(rows) + "\n")


def _verdict(s: dict) -> str:
    parts, compact = s["verification_pct_of_load parts"], s["verification_pct_of_load compacted"]
    if parts <= 1:
        return "met in both layouts"
    return ("met by the compacted store, not by the parts" if compact <= 1 else "not met") + (
        ", whose stat per file alone costs more than the goal" if s["stat_only_pct_of_load parts"] > 1 else "")


@helper
def feature_budget(res: Results, what: str, model: str = "llama-3.1-8b-instruct") -> str:
    """A size of the default feature set (conf/features/default.yaml) for a model config's shape, as
    lengthpred.features.budget works it out: `before` and `per_100k` (every layer, pool and fusion), `after` (the
    trimmed set), `large` (the size a prompt above which the default set is trimmed)."""
    import yaml

    from docsgen.pages.configref import conf_dir
    from lengthpred.features.budget import LARGE_BYTES, default_bytes_per_prompt, human, trim_for_model
    from lengthpred.features.settings import FeatureSettings

    conf = conf_dir(res.root)
    feats = yaml.safe_load((conf / "features" / "default.yaml").read_text())
    shape = yaml.safe_load((conf / "model" / f"{model}.yaml").read_text())
    n_layers, d = int(shape["num_hidden_layers"]), int(shape["hidden_size"])
    full = FeatureSettings(layers=feats["layers"], pools=tuple(feats["pools"]), fused=tuple(feats["fused"]),
                           token_layers=tuple(feats["token_layers"]), dtype=feats["dtype"])
    trimmed, _ = trim_for_model(full, n_layers, d)
    sizes = {"before": default_bytes_per_prompt(full, n_layers, d),
             "per_100k": 100_000 * default_bytes_per_prompt(full, n_layers, d),
             "after": default_bytes_per_prompt(trimmed, n_layers, d), "large": LARGE_BYTES}
    return human(sizes[what])


def _rerun(script: str, rec: dict, out: str) -> str:
    args = "".join(f" --{k.replace('_', '-')} {v}" for k, v in rec["settings"].items() if v is not None)
    return f".venv/bin/python benchmarks/{script}{args} --out {out}"


@helper
def scale_commands(res: Results) -> str:
    """The commands that rewrite the committed records, with the settings each record was measured with."""
    lines = [_rerun("bench_store_compaction.py", res.json(STORE), STORE),
             _rerun("bench_torchrun_extract.py", res.json(TORCHRUN), TORCHRUN),
             _rerun("bench_torchrun_extract.py", res.json(TORCHRUN_LARGE), TORCHRUN_LARGE),
             _rerun("bench_torchrun_extract.py", res.json(TORCHRUN_THREADS), TORCHRUN_THREADS)]
    return "```bash\n" + "\n".join(lines) + "\nmake docs\n```"
