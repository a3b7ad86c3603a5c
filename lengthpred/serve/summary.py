"""Every stored serve experiment on one page: what each folder ran, whether its calibration passed, and the
paired gains of every policy over FCFS (and over prefill-first FCFS where a folder ran it), so a reader can see
which findings hold across workloads and which rest on one folder.

A folder is a serve run folder (`scripts/serve.py`'s output) or one split in parts run on the same profile
(`a/`, `b/`: merged first, `lengthpred.serve.merge`). Gains are `lengthpred.serve.paired.paired_gains` over the
repeats of the real runs, without the leave-one-request-out ranges (each folder's own tables have those).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lengthpred.errors import DataError
from lengthpred.serve.anatomy_cli import md_table
from lengthpred.serve.merge import merge_runs
from lengthpred.serve.metrics import SLO
from lengthpred.serve.paired import paired_gains

METRICS = {"per_token_latency_mean": "per-token mean", "per_token_latency_p50": "per-token median",
           "ttft_mean": "TTFT mean", "jct_mean": "E2E mean", "jct_p99": "E2E p99"}
BASELINES = ("fcfs", "fcfs-prefill-first")


@dataclass
class StoredFolder:
    """One experiment's real runs (tidy rows), its serve.json and its calibration check (None if not stored)."""

    name: str
    runs: pd.DataFrame
    meta: dict
    check: dict | None


def _parts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "serve.json").is_file())


def _read(folder: Path, name: str) -> StoredFolder:
    meta = json.loads((folder / "serve.json").read_text())
    runs = pd.read_csv(folder / "serve_runs.csv")
    real = runs[runs["hardware"] == meta["engine"]].drop(columns=["experiment"], errors="ignore")
    check = folder / "calibration_check.json"
    return StoredFolder(name, real, meta, json.loads(check.read_text()) if check.is_file() else None)


def load_folder(folder: Path) -> StoredFolder:
    """A serve run folder, or one whose parts (sub-folders holding serve.json) are merged first; a folder that
    is neither is refused in one line."""
    folder = Path(folder)
    if (folder / "serve.json").is_file():
        return _read(folder, folder.name)
    parts = _parts(folder) if folder.is_dir() else []
    if len(parts) < 2:
        raise DataError(f"{folder}: not a serve run folder (no serve.json, nor two parts holding one)")
    with tempfile.TemporaryDirectory() as tmp:
        merged = merge_runs(parts, Path(tmp) / "merged")
        got = _read(merged, folder.name)
    return got


def describe(f: StoredFolder) -> str:
    """The workload in a few words: pool, arrivals, answers, batch cap and requests per run."""
    c = f.meta["config"]
    pool = ", ".join(sorted(set(map(str, f.runs["data"])))) if "data" in f.runs else "?"
    arrival = str(c.get("arrival", "poisson"))
    if arrival == "gamma":
        arrival += f" cv {c.get('arrival_cv')}"
    elif arrival == "trace":
        arrival += f" {c.get('trace_name')}"
    return (f"{pool} pool, {arrival}, {c.get('answers', 'replay')} answers, "
            f"cap {f.meta['limits']['max_batch']}, {c.get('n_requests')} req")


def calibration(f: StoredFolder) -> str:
    if f.check is None:
        return "not checked"
    return "passed" if f.check.get("ok") else "flagged"


def folder_gains(f: StoredFolder, baselines: Sequence[str] = BASELINES) -> pd.DataFrame:
    """Paired gains of every other policy over each baseline the folder ran (`paired.COLUMNS` + `baseline`)."""
    frames = []
    for b in baselines:
        if b in set(f.runs["policy"]):
            g = paired_gains(f.runs, pd.DataFrame(), SLO(), metrics=list(METRICS), loo=False, baseline=b)
            frames.append(g.assign(baseline=b))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _cell(r: pd.Series) -> str:
    if not math.isfinite(r.gain):
        return "—"
    if math.isfinite(r.ci_low):
        return f"{100 * r.gain:+.0f}% [{100 * r.ci_low:+.0f}, {100 * r.ci_high:+.0f}]"
    return f"{100 * r.gain:+.0f}% (n {r.n})"


def summary_table(folders: Sequence[StoredFolder], baseline: str) -> str:
    """Markdown: one row per (folder, policy) against `baseline`; each cell the gain and its paired 95% interval
    over repeats (or the number of repeats, too few for one), and the exact sign-flip p of the per-token mean."""
    head = ["folder", "workload", "calibration", "load", "policy (predictor)", "repeats", *METRICS.values(),
            "p (per-token mean)"]
    rows = []
    for f in folders:
        g = folder_gains(f, [baseline])
        if g.empty:
            continue
        for (load, pol, pred), x in g.groupby(["load", "policy", "predictor"], sort=True):
            by = x.set_index("metric")
            cells = [_cell(by.loc[m]) if m in by.index else "—" for m in METRICS]
            p = by.loc["per_token_latency_mean", "p_value"] if "per_token_latency_mean" in by.index else math.nan
            n = int(by["n"].max())
            rows.append([f.name, describe(f), calibration(f), f"{load:g}", f"{pol} ({pred})", str(n), *cells,
                         f"{p:.2g}"])
    return md_table(head, rows).rstrip("\n")
