"""The scale-out how-to's measured table (docs/how-to/gpu-and-slurm.md), rendered from the committed records of
benchmarks/bench_store_compaction.py and benchmarks/bench_torchrun_extract.py (their `--out` files under
docs/results/data/scale/), with the machine and its load beside the numbers."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

if TYPE_CHECKING:
    from lengthpred.features.settings import FeatureSettings

STORE = f"{DATA}/scale/store_compaction.json"  # 8 narrow columns a part: the worst case for verification's share
STORE_DEFAULT = f"{DATA}/scale/store_compaction_default.json"  # the default feature set at SmolLM2-135M's shape
STORE_LLAMA = f"{DATA}/scale/store_compaction_llama.json"  # the trimmed default set at Llama-3.1-8B's shape
SMOLLM2_SHAPE = (30, 576)  # decoder layers, width: the embedded GGUF's config states no shape (conf/model comment)
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


def _default_set(res: Results, model: str | None) -> tuple[FeatureSettings, FeatureSettings, int, int]:
    """(the default feature set of conf/features/default.yaml, that set trimmed as extraction trims it, decoder
    layers, width) for a model config's shape; `None`: SmolLM2-135M."""
    import yaml

    from docsgen.pages.configref import conf_dir
    from lengthpred.features.budget import trim_for_model
    from lengthpred.features.settings import FeatureSettings

    conf = conf_dir(res.root)
    feats = yaml.safe_load((conf / "features" / "default.yaml").read_text())
    if model is None:
        n_layers, d = SMOLLM2_SHAPE
    else:
        shape = yaml.safe_load((conf / "model" / f"{model}.yaml").read_text())
        n_layers, d = int(shape["num_hidden_layers"]), int(shape["hidden_size"])
    full = FeatureSettings(layers=feats["layers"], pools=tuple(feats["pools"]), fused=tuple(feats["fused"]),
                           token_layers=tuple(feats["token_layers"]), dtype=feats["dtype"])
    return full, trim_for_model(full, n_layers, d)[0], n_layers, d


def _default_columns(res: Results, model: str | None) -> tuple[int, int, bool]:
    """(columns a part, width, whether a token-level file is kept) of the default feature set for a model config's
    shape, trimmed as extraction trims it; `None`: SmolLM2-135M."""
    _, s, n_layers, d = _default_set(res, model)
    layers = n_layers + 1 if s.layers == "all" else len(s.layers)
    return layers * len(s.pool_names), d, bool(s.token_layers)


def _shape_names(res: Results, rec: dict) -> tuple[str, str]:
    """(a short name, the shape in words) of the store a record measured: its columns, width and token-level file,
    and which default set that is (checked against the config, so a changed default cannot leave a stale name)."""
    t = rec["result"]
    said = (f"{t['columns_per_part']} columns of d={t['d']} a part"
            + (", with a token-level file" if t.get("token_files") else ""))
    shape = (t["columns_per_part"], t["d"], bool(t.get("token_files")))
    for model, name in ((None, "SmolLM2-135M's default feature set"),
                        ("llama-3.1-8b-instruct", "Llama-3.1-8B's default set, trimmed as extraction trims it")):
        if shape == _default_columns(res, model):
            return name, said
    return "a narrow store, cut to what a few heads read", said


def _shape(res: Results, rec: dict) -> str:
    name, said = _shape_names(res, rec)
    return f"{said} ({name})"


def _store_rows(res: Results, rec: dict) -> list[str]:
    s, reps = rec["result"], rec["settings"]["reps"]
    tokens = (f"; the {s['token_files']} token-level files are checked when token states are read "
              f"({s['token_files_check_s (when token states are read)'] * 1e3:.1f} ms)" if s.get("token_files") else "")
    return [
        f"| one column of {s['prompts']:,} prompts, {_shape(res, rec)}, float16, {s['parts']} parts of "
        f"{rec['settings']['batch']}, `bench_store_compaction.py` | median of {reps} loads: "
        f"{s['column_load_s parts']:.4f} s from the parts, {s['column_load_s compacted']:.4f} s compacted: "
        f"**{s['speedup']:.1f}x** (goal ≥ 10x: {'met' if s['speedup'] >= 10 else 'not met'}) |",
        f"| per-load verification, same store (median of {reps}) | compacted: "
        f"**{s['verification_pct_of_load compacted']:.2f}%** of a load; parts: "
        f"**{s['verification_pct_of_load parts']:.2f}%** of a parts load (one stat per part file, nothing read; "
        f"the {s['parts']} stats alone: {s['stat_only_pct_of_load parts']:.2f}%{tokens}) (goal ≤ 1%: {_verdict(s)}); "
        "reading the verification record, which also lists the parts' ids for the load: "
        f"{s['record_read_pct_of_load parts']:.2f}% (parts), {s['record_read_pct_of_load compacted']:.2f}% "
        "(compacted) |",
    ]


def _pct(x: float) -> str:
    return f"{x:.2f}%"


@helper
def store_findings(res: Results) -> str:
    """What the three store shapes say of the two store goals, rendered from their records."""
    shapes = []
    for f in (STORE_DEFAULT, STORE_LLAMA, STORE):
        rec = res.json(f)
        name, said = _shape_names(res, rec)
        shapes.append((f"{name} ({said})", rec["result"] | {"batch": rec["settings"]["batch"]}))
    met = [f"{name}: {_pct(t['verification_pct_of_load parts'])}" for name, t in shapes
           if t["verification_pct_of_load parts"] <= 1]
    out = [f"A parts load's verification is within 1% of the load for {'; '.join(met) or 'no shape measured'}"]
    for name, t in shapes:
        share, stats = t["verification_pct_of_load parts"], t["stat_only_pct_of_load parts"]
        if share <= 1:
            continue
        floor = ("the stats alone exceed the goal" if stats > 1 else
                 f"the stats alone take {_pct(stats)}, leaving {_pct(1 - stats)} for the rest of the check")
        out.append(f". It is not for {name}: {_pct(share)}, where a part's load is smallest and {floor}; its "
                   f"compacted store's is {_pct(t['verification_pct_of_load compacted'])}")
    fast = [f"{name}: {t['speedup']:.1f}x" for name, t in shapes if t["speedup"] >= 10]
    out.append(f". Compaction makes a column load at least 10x faster for {'; '.join(fast) or 'no shape measured'}")
    for name, t in shapes:
        if t["speedup"] >= 10:
            continue
        conv = t["float32_conversion_s (both layouts)"]
        out.append(f". It makes it {t['speedup']:.1f}x faster for {name}, whose compacted load "
                   f"({t['column_load_s compacted']:.4f} s) is mostly the conversion to float32 that every load of "
                   f"the column makes in either layout ({conv:.4f} s): what compaction removes, opening one file per "
                   f"{t['batch']} prompts, weighs less against a wide column")
    return "".join(out) + "."


@helper
def scale_measured(res: Results) -> str:
    store, run, run_all = res.json(STORE), res.json(TORCHRUN), res.json(TORCHRUN_THREADS)
    large = res.json(TORCHRUN_LARGE)
    stores = [res.json(STORE_DEFAULT), res.json(STORE_LLAMA), store]
    rows = ["| Benchmark | Result |", "|---|---|", *(r for rec in stores for r in _store_rows(res, rec)),
            _torchrun_row(run), _torchrun_row(large), _torchrun_row(run_all)]
    where = "".join(f"Store, {_shape_names(res, rec)[1]}: {measured_where(rec)}.  \n" for rec in stores)
    return (where + "Torchrun, one thread per process: " + measured_where(run)
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
    from lengthpred.features.budget import LARGE_BYTES, default_bytes_per_prompt, human

    full, trimmed, n_layers, d = _default_set(res, model)
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
    lines = [*(_rerun("bench_store_compaction.py", res.json(f), f) for f in (STORE_DEFAULT, STORE_LLAMA, STORE)),
             _rerun("bench_torchrun_extract.py", res.json(TORCHRUN), TORCHRUN),
             _rerun("bench_torchrun_extract.py", res.json(TORCHRUN_LARGE), TORCHRUN_LARGE),
             _rerun("bench_torchrun_extract.py", res.json(TORCHRUN_THREADS), TORCHRUN_THREADS)]
    return "```bash\n" + "\n".join(lines) + "\nmake docs\n```"
