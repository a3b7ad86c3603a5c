"""The serving results from the committed run folders (data/reference/smollm2-135m/serve_*): producers run the
project's own serve scripts over the ten-repeat folders and commit their rows under docs/results/data/serving/;
the pages and the headline render from those rows.

- `serving-gains`: every policy's paired gain over FCFS (and over prefill-first FCFS where a folder ran it), per
  folder and headline statistic (`lengthpred.serve.summary.folder_gains`: pooled ratio, 95% paired bootstrap
  over repeats, exact sign-flip p) with the median of the per-repeat gains beside it. Seconds.
- `serving-summary`, `serving-step-excess`: `scripts/serve_summary.py` and `scripts/serve_step_excess.py` over
  the same folders, their output committed as Markdown fragments. About a minute (the summary's
  leave-one-request-out table).
- `serving-fidelity`: `scripts/serve_fidelity_overview.py`'s replays of every folder (each on its own
  calibration profile, four ways), committed as the per-folder fidelity and every simulated-vs-engine gain row;
  the overview page is rendered from them by `lengthpred.lab.fidelity_overview.overview_page`. A few minutes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import tempfile
from dataclasses import asdict
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

from docsgen.registry import PRODUCERS, Producer, helper, register_producer
from docsgen.render import rel
from docsgen.results import Results
from docsgen.studies import DATA

REFERENCE = "data/reference/smollm2-135m"
# the ten-repeat folders, in the order every serving table lists them
FOLDERS = ("serve_demo_engine10", "serve_load08", "serve_load08_blas1", "serve_pf10", "serve_pf10_blas1",
           "serve_aging10", "serve_tie10", "serve_gamma10", "serve_trace10", "serve_trace10_blas1", "serve_natural10",
           "serve_natural10_blas1", "serve_cap8_10", "serve_cap16_10", "serve_cap16_120", "serve_bench_pool10",
           "serve_bench_pool10_pf")
WINDOW_S = 2.0  # the tracking replay's speed windows (the overview's --window-s)
OUT = f"{DATA}/serving"
GAINS, FOLDER_INFO = f"{OUT}/paired_gains.csv", f"{OUT}/folders.csv"
SUMMARY, STEP_EXCESS = f"{OUT}/summary.md", f"{OUT}/step_excess.md"
FIDELITY, GAIN_FIDELITY = f"{OUT}/fidelity.json", f"{OUT}/gain_fidelity.csv"


def folders(root: Path) -> list[Path]:
    return [root / REFERENCE / f for f in FOLDERS]


def folder_files(root: Path) -> list[Path]:
    return [f for d in folders(root) for f in sorted(d.rglob("*")) if f.is_file()]


@cache
def script(root: Path, name: str) -> ModuleType:
    """A script of scripts/ as a module (scripts/ is no package: each is an entry point)."""
    spec = importlib.util.spec_from_file_location(f"_docsgen_{name}", root / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _csv(df: pd.DataFrame) -> str:
    # six significant digits: what the pages show needs three; the last bits of a float differ between machines
    return df.to_csv(index=False, lineterminator="\n", float_format="%.6g")


def median_per_repeat(runs: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per (load, policy, predictor, metric): the median over repeats of 1 − policy / baseline of that repeat."""
    from lengthpred.serve.paired import RUN_KEYS

    wide = runs.set_index([*RUN_KEYS, "metric"])["value"]
    base = runs[runs["policy"] == baseline]
    if base.empty:
        return pd.DataFrame(columns=["load", "policy", "predictor", "metric", "median_per_repeat"])
    bpred = sorted(set(base["predictor"]))[0]
    rows = []
    for (load, pol, pred, metric), g in runs.groupby(["load", "policy", "predictor", "metric"]):
        if pol == baseline:
            continue
        per = []
        for seed, v in zip(g["seed"], g["value"], strict=True):
            b = wide.get((baseline, bpred, load, seed, metric), np.nan)
            if np.isfinite(b) and np.isfinite(v) and b:
                per.append(1 - v / b)
        rows.append((load, pol, pred, metric, float(np.median(per)) if per else np.nan))
    return pd.DataFrame(rows, columns=["load", "policy", "predictor", "metric", "median_per_repeat"])


def run_gains(root: Path) -> dict[str, str]:
    from lengthpred.serve.summary import BASELINES, calibration, describe, folder_gains, load_folder

    frames, info = [], []
    for d in folders(root):
        f = load_folder(d)
        info.append((d.name, describe(f), calibration(f), int(f.runs["seed"].nunique())))
        for b in BASELINES:
            if b not in set(f.runs["policy"]):
                continue
            g = folder_gains(f, [b])
            med = median_per_repeat(f.runs, b)
            g = g.merge(med, on=["load", "policy", "predictor", "metric"], how="left")
            frames.append(g.drop(columns=["loo_low", "loo_high", "loo_request"]).assign(folder=d.name))
    gains = pd.concat(frames, ignore_index=True)
    gains = gains[["folder", "baseline", *[c for c in gains.columns if c not in ("folder", "baseline")]]]
    info_df = pd.DataFrame(info, columns=["folder", "workload", "calibration", "repeats"])
    return {GAINS: _csv(gains), FOLDER_INFO: _csv(info_df)}


def _script_output(root: Path, name: str, args: list[str]) -> str:
    """What `scripts/<name>.py args --out FILE` writes to FILE (its stdout discarded)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.md"
        with contextlib.redirect_stdout(io.StringIO()):
            status = script(root, name).main([*args, "--out", str(out)])
        if status != 0:
            raise RuntimeError(f"scripts/{name}.py exited {status}")
        return out.read_text(encoding="utf-8")


def run_summary(root: Path) -> dict[str, str]:
    return {SUMMARY: _script_output(root, "serve_summary", [str(d) for d in folders(root)])}


def run_step_excess(root: Path) -> dict[str, str]:
    return {STEP_EXCESS: _script_output(root, "serve_step_excess", [str(d) for d in folders(root)])}


def run_fidelity(root: Path) -> dict[str, str]:
    with contextlib.redirect_stderr(io.StringIO()):  # the replays' progress bar
        rows, gains = script(root, "serve_fidelity_overview").replay_rows(folders(root), WINDOW_S)
    fid = {attr: [{"folder": n, "workload": w, "fidelity": asdict(f) if f is not None else None} for n, w, f in r]
           for attr, r in rows.items()}
    g = pd.concat([x.assign(replay=attr, folder=n) for attr, r in gains.items() for n, x in r], ignore_index=True)
    g = g[["replay", "folder", *[c for c in g.columns if c not in ("replay", "folder")]]]
    return {FIDELITY: json.dumps({"window_s": WINDOW_S, "replays": fid}, indent=1) + "\n", GAIN_FIDELITY: _csv(g)}


@helper
def fidelity_overview(res: Results) -> str:
    """The fidelity overview's tables, rendered from the committed replay rows."""
    from lengthpred.lab.fidelity_overview import FolderFidelity, overview_page

    blob = res.json(FIDELITY)
    gains = res.csv(GAIN_FIDELITY, columns=("replay", "folder"), dtype=None)
    try:
        rows = {attr: [(r["folder"], r["workload"], _fidelity(FolderFidelity, r["fidelity"])) for r in folders_]
                for attr, folders_ in blob["replays"].items()}
        g = {attr: [(name, gains[(gains["replay"] == attr) & (gains["folder"] == name)]
                     .drop(columns=["replay", "folder"]).reset_index(drop=True)) for name, _, _ in r]
             for attr, r in rows.items()}
        return overview_page(rows, g, float(blob["window_s"]))
    except (KeyError, TypeError) as e:
        res.fail(FIDELITY, f"malformed ({e.__class__.__name__}: {e})")


def _fidelity(cls: type, d: dict | None):
    if d is None:
        return None
    return cls(d["runs"], {k: tuple(v) for k, v in d["errors"].items()}, tuple(d["mean_cells"]), tuple(d["p90_cells"]),
               d["runs_meeting"], d["runs_ttft_only"], tuple(d["drift"]))


_HERE = "docsgen/pages/serving.py"
for _p in (
    Producer("serving-gains", (GAINS, FOLDER_INFO), folder_files, (_HERE,), run_gains),
    Producer("serving-summary", (SUMMARY,), folder_files, (_HERE, "scripts/serve_summary.py"), run_summary),
    Producer("serving-step-excess", (STEP_EXCESS,), folder_files, (_HERE, "scripts/serve_step_excess.py"),
             run_step_excess),
    Producer("serving-fidelity", (FIDELITY, GAIN_FIDELITY), folder_files,
             (_HERE, "scripts/serve_fidelity_overview.py"), run_fidelity),
):
    register_producer(_p)


@helper
def serving_provenance(res: Results, producer: str) -> str:
    """Which folders and script a serving page's rows came from, and how to remake them."""
    p = PRODUCERS[producer]
    code = ", ".join(f"`{c}`" for c in p.code if c.startswith("scripts/")) or "`lengthpred.serve.summary`"
    names = ", ".join(f"`{f}`" for f in FOLDERS)
    files = ", ".join(f"`{Path(o).name}`" if o.endswith(".md") else f"[{Path(o).name}]({rel(res, o)})"
                      for o in p.outputs)  # a Markdown fragment is included below, not served
    return (f"_Rows: {files}, made by {code} over the "
            f"committed runs in `{REFERENCE}/` ({names}). `make docs` remakes them when a folder or that code "
            "changes (producer `" + producer + "`)._")
