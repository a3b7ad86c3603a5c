"""Stored serving runs merged into one comparison: a policy run later (e.g. `fcfs-pf`) joins the runs it pairs
with, when both replayed the same requests and arrivals on the same calibration profile.

Runs pair when they share the profile (so the capacity, hence every arrival time, is the same), the prompt pool
and the request draw (the serve config's data, split, n_requests, arrival process and answers mode). A merged
folder holds every run once; `scripts/serve.py serve.resimulate=<it>` then tables them all, paired by repeat.
With `replace=True` a run stored again in a later folder (a repeat rerun because something disturbed it) takes
the earlier one's place, and serve.json lists what was replaced by what.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lengthpred.errors import DataError

KEYS = ["policy", "predictor", "load", "seed"]
SAME = {"split": "test", "n_requests": None, "arrival": "poisson", "arrival_cv": None, "trace_name": None,
        "trace_path": None, "length_cap": None, "answers": "replay", "natural_max_tokens": None}
# key → its value in runs stored before it existed; the engine's sampling decides natural answers too
ENGINE_SAME = ("temperature", "top_p", "seed", "max_num_seqs", "max_num_batched_tokens", "dtype")
COPIED = ("calibration_steps.parquet", "calibration_check.json", "profile.json")


def _meta(d: Path) -> dict:
    f = d / "serve.json"
    if not f.is_file():
        raise DataError(f"{d}: not a serve run folder (no serve.json)")
    return json.loads(f.read_text())


def merge_runs(folders: Sequence[Path], out: Path, replace: bool = False) -> Path:
    """Write the runs of `folders` (serve run folders, the first one's calibration kept) into `out`; refuse in
    one line runs that do not pair (another profile, pool or draw) or, unless `replace`, a run stored twice
    (with `replace`, the last folder's copy of such a run is kept)."""
    if len(folders) < 2:
        raise DataError("serve merge: give at least two serve run folders")
    if out.exists():
        raise DataError(f"serve merge: {out} exists; choose a new folder")
    metas = [_meta(Path(d)) for d in folders]
    first = metas[0]
    for d, m in zip(folders[1:], metas[1:], strict=True):
        if m["profile"]["profile"] != first["profile"]["profile"]:
            raise DataError(f"serve merge: {d} ran on another profile than {folders[0]} (its arrivals differ); "
                            f"rerun it with serve.profile_path={Path(folders[0]) / 'profile.json'}")
        natural = "natural" in (first["config"].get("answers"), m["config"].get("answers"))
        for k, default in SAME.items():
            if k == "natural_max_tokens" and not natural:
                continue  # replayed lengths: the cap of natural answers plays no part
            a, b = first["config"].get(k, default), m["config"].get(k, default)
            if a != b:
                raise DataError(f"serve merge: {d} has serve.{k}={b!r}, {folders[0]} {a!r}: not the same requests")
        for k in ENGINE_SAME:
            a, b = (first["config"].get("engine") or {}).get(k), (m["config"].get("engine") or {}).get(k)
            if a != b:
                raise DataError(f"serve merge: {d} has serve.engine.{k}={b!r}, {folders[0]} {a!r}: not the same requests")
        if m["limits"] != first["limits"]:
            raise DataError(f"serve merge: {d} ran with engine limits {m['limits']}, {folders[0]} {first['limits']}")
    parts = [pd.read_csv(Path(d) / "serve_runs.csv") for d in folders]
    for d, r in zip(folders[1:], parts[1:], strict=True):
        if set(r["data"]) != set(parts[0]["data"]):
            raise DataError(f"serve merge: {d} served data {sorted(set(r['data']))}, {folders[0]} "
                            f"{sorted(set(parts[0]['data']))}: not the same requests")
    keys = [set(map(tuple, r[KEYS].drop_duplicates().itertuples(index=False, name=None))) for r in parts]
    owner: dict[tuple, int] = {}  # run → the folder whose copy is kept
    replaced = []
    for i, (d, ks) in enumerate(zip(folders, keys, strict=True)):
        for k in sorted(ks & owner.keys()):
            if not replace:
                raise DataError(f"serve merge: run {k} of {d} is stored in more than one folder "
                                "(--replace keeps the last folder's copy)")
            run = {c: v.item() if hasattr(v, "item") else v for c, v in zip(KEYS, k, strict=True)}
            replaced.append({"run": run, "dropped_from": str(folders[owner[k]]), "kept_from": str(d)})
        owner.update(dict.fromkeys(ks, i))
    def kept(tables: Sequence[pd.DataFrame]) -> pd.DataFrame:  # each folder's rows of the runs it keeps
        return pd.concat([t[[owner[k] == i for k in t[KEYS].itertuples(index=False, name=None)]]
                          for i, t in enumerate(tables)], ignore_index=True)

    runs = kept(parts)
    reqs = kept([pd.read_parquet(Path(d) / "serve_requests.parquet") for d in folders])
    steps = kept([pd.read_parquet(Path(d) / "serve_steps.parquet") for d in folders])
    out.mkdir(parents=True)
    runs.to_csv(out / "serve_runs.csv", index=False)
    reqs.to_parquet(out / "serve_requests.parquet", index=False)
    steps.to_parquet(out / "serve_steps.parquet", index=False)
    for f in COPIED:
        if (Path(folders[0]) / f).is_file():
            shutil.copy2(Path(folders[0]) / f, out / f)
    cfg = dict(first["config"])
    for k in ("policies", "seeds", "loads"):
        cfg[k] = list(dict.fromkeys(x for m in metas for x in m["config"][k]))
    # the predictor of the runs that had one (a folder of FCFS runs says none)
    cfg["predictor"] = next((m["config"]["predictor"] for m in metas
                             if (m["config"].get("predictor") or {}).get("kind", "none") != "none"), cfg.get("predictor"))
    meta = {**first, "config": cfg, "merged_from": [str(d) for d in folders], "replaced": replaced,
            "overload": [o for m in metas for o in m.get("overload", [])]}
    (out / "serve.json").write_text(json.dumps(meta, indent=1, default=str))
    return out
