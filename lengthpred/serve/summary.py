"""Every stored serve experiment on one page: what each folder ran, whether its calibration passed, and the
paired gains of every policy over FCFS (and over prefill-first FCFS where a folder ran it), so a reader can see
which findings hold across workloads and which rest on one folder.

A folder is a serve run folder (`scripts/serve.py`'s output) or one split in parts run on the same profile
(`a/`, `b/`: merged first, `lengthpred.serve.merge`). Gains are `lengthpred.serve.paired.paired_gains` over the
repeats of the real runs; `loo_table` adds how far leaving one request out moves each gain over FCFS (one short
answer that waited can carry a run's per-token mean).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lengthpred.errors import DataError
from lengthpred.metrics import spearman_or_nan
from lengthpred.serve.merge import merge_runs
from lengthpred.serve.metrics import SLO
from lengthpred.serve.paired import paired_gains
from lengthpred.serve.tables_cli import md_table

METRICS = {"per_token_latency_mean": "per-token mean", "per_token_latency_p50": "per-token median",
           "ttft_mean": "TTFT mean", "jct_mean": "E2E mean", "jct_p99": "E2E p99"}
BASELINES = ("fcfs", "fcfs-prefill-first")
LOO_COLUMNS = {"rid", "policy", "predictor", "load", "seed", "arrival", "first_token", "finish", "output_tokens", "status"}


@dataclass
class StoredFolder:
    """One experiment's real runs (tidy rows), its serve.json and its calibration check (None if not stored)."""

    name: str
    runs: pd.DataFrame
    meta: dict
    check: dict | None
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)  # per request, when read with `requests=True`


def _parts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "serve.json").is_file())


def _read(folder: Path, name: str, requests: bool = False) -> StoredFolder:
    meta = json.loads((folder / "serve.json").read_text())
    runs = pd.read_csv(folder / "serve_runs.csv")
    real = runs[runs["hardware"] == meta["engine"]].drop(columns=["experiment"], errors="ignore")
    check = folder / "calibration_check.json"
    rq = folder / "serve_requests.parquet"
    reqs = pd.read_parquet(rq) if requests and rq.is_file() else pd.DataFrame()
    return StoredFolder(name, real, meta, json.loads(check.read_text()) if check.is_file() else None, reqs)


@contextmanager
def serve_folder(folder: Path) -> Iterator[Path]:
    """`folder` itself when it is a serve run folder; else its parts (sub-folders holding serve.json) merged into
    a temporary one, removed on exit; a folder that is neither is refused in one line."""
    folder = Path(folder)
    if (folder / "serve.json").is_file():
        yield folder
        return
    parts = _parts(folder) if folder.is_dir() else []
    if len(parts) < 2:
        raise DataError(f"{folder}: not a serve run folder (no serve.json, nor two parts holding one)")
    with tempfile.TemporaryDirectory() as tmp:
        yield merge_runs(parts, Path(tmp) / folder.name)


def load_folder(folder: Path, requests: bool = False) -> StoredFolder:
    """A serve run folder, or one whose parts (sub-folders holding serve.json) are merged first; a folder that
    is neither is refused in one line. `requests`: also read the per-request rows (for `loo_table`)."""
    with serve_folder(folder) as d:
        return _read(d, Path(folder).name, requests)


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


def folder_gains(f: StoredFolder, baselines: Sequence[str] = BASELINES, loo: bool = False) -> pd.DataFrame:
    """Paired gains of every other policy over each baseline the folder ran (`paired.COLUMNS` + `baseline`);
    `loo`: with the leave-one-request-out ranges (the folder read with its requests)."""
    loo = loo and LOO_COLUMNS <= set(f.requests.columns)  # a folder stored without its requests: gains only
    frames = []
    for b in baselines:
        if b in set(f.runs["policy"]):
            g = paired_gains(f.runs, f.requests if loo else pd.DataFrame(), SLO(), metrics=list(METRICS), loo=loo,
                             baseline=b)
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


def _loo_cell(r: pd.Series) -> str:
    if not math.isfinite(r.gain):
        return "—"
    if not math.isfinite(r.loo_low):
        return f"{100 * r.gain:+.0f}%"
    return f"{100 * r.gain:+.0f}% ({100 * r.loo_low:+.0f} … {100 * r.loo_high:+.0f})"


def _yielded(r: pd.DataFrame) -> str:
    """Share of the arm's requests whose decode yielded its slot (`split`; a request stored before the column
    existed counts as not yielded)."""
    return f"{100 * r['split'].eq(True).mean():.0f}%" if "split" in r and len(r) else "—"


def _ranked(r: pd.DataFrame) -> str:
    """Spearman of the arm's predictions with the answers it finished, pooled over its runs (per-run range)."""
    if not {"prediction", "output_tokens", "status", "seed"} <= set(r.columns):
        return "—"
    r = r[r["prediction"].notna() & r["output_tokens"].notna() & (r["status"] == "finished")]
    if len(r) < 3 or r["prediction"].nunique() < 2:
        return "—"
    per_run = [spearman_or_nan(g["prediction"], g["output_tokens"]) for _, g in r.groupby("seed")
               if len(g) >= 3 and g["prediction"].nunique() > 1]
    pooled = spearman_or_nan(r["prediction"], r["output_tokens"])
    return f"{pooled:.2f} ({min(per_run):.2f} … {max(per_run):.2f})" if per_run else f"{pooled:.2f}"


def loo_table(folders: Sequence[StoredFolder], baseline: str = "fcfs") -> str:
    """Markdown: one row per (folder, policy) against `baseline`; each cell the gain and, in brackets, its lowest
    and highest value when one request (of one repeat, left out of every policy's run) is dropped ("—" without
    stored requests), and the request whose removal moves the per-token mean most. Folders are read with
    `requests=True`."""
    head = ["folder", "load", "policy (predictor)", "repeats", *METRICS.values(), "request that moves per-token mean most"]
    rows = []
    for f in folders:
        g = folder_gains(f, [baseline], loo=True)
        if g.empty:
            continue
        for (load, pol, pred), x in g.groupby(["load", "policy", "predictor"], sort=True):
            by = x.set_index("metric")
            cells = [_loo_cell(by.loc[m]) if m in by.index else "—" for m in METRICS]
            who = by.loc["per_token_latency_mean", "loo_request"] if "per_token_latency_mean" in by.index else None
            rows.append([f.name, f"{load:g}", f"{pol} ({pred})", str(int(by["n"].max())), *cells,
                         who if isinstance(who, str) and who else "—"])
    return md_table(head, rows).rstrip("\n")


def predictor_table(folders: Sequence[StoredFolder]) -> str:
    """Markdown: one row per (folder, load, policy) that served predictions or prefills first: how many runs, the
    share of its requests whose decode yielded its slot after the prefill (what makes an in-engine prediction
    cost more than its readout), and how its predictions ranked the answers it served (Spearman pooled over its
    runs, with the per-run range). Folders are read with `requests=True`."""
    head = ["folder", "load", "policy (predictor)", "runs", "decodes that yielded",
            "predictions' Spearman with the answers (pooled; per run)"]
    rows = []
    for f in folders:
        r = f.requests
        if not {"load", "policy", "predictor", "seed"} <= set(r.columns):
            continue
        for (load, pol, pred), arm in r.groupby(["load", "policy", "predictor"], sort=True):
            predicts = "prediction" in arm and arm["prediction"].notna().any()
            splits = "split" in arm and arm["split"].eq(True).any()
            if predicts or splits:
                rows.append([f.name, f"{load:g}", f"{pol} ({pred})", str(arm["seed"].nunique()), _yielded(arm),
                             _ranked(arm)])
    return md_table(head, rows).rstrip("\n")
