"""Per-prompt length targets: the serving model's own lengths, from merged generations or the committed
reference trace `data/reference/<model>/<data.name>.jsonl`.

Censoring rule (the same for every head): a capped sample (finish_reason "length") counts as the cap,
a lower bound, and is counted (`n_capped`, `capped_frac`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.generate.reference_parts import settings_mismatch
from lengthpred.paths import resolve

log = logging.getLogger(__name__)

STATISTICS = ("mean", "median", "first")
REFERENCE_COLUMNS = ("id", "sample", "length", "finish_reason", "prompt_tokens")


def reference_path(cfg) -> Path:
    return resolve(cfg.paths.data_dir) / "reference" / cfg.model.name / f"{cfg.data.name}.jsonl"


def target_statistic(lengths: Iterable[float], statistic: str = "mean") -> float:
    """One prompt's target from its samples (in sample order)."""
    x = np.asarray(list(lengths), dtype=float)
    if x.size == 0:
        raise DataError("a prompt with no samples has no target")
    if statistic == "mean":
        return float(x.mean())
    if statistic == "median":
        return float(np.median(x))
    if statistic == "first":
        return float(x[0])
    raise ConfigError(f"target statistic {statistic!r}: use one of {list(STATISTICS)}")


def per_prompt(rows: pd.DataFrame, statistic: str = "mean", cap: int | None = None) -> pd.DataFrame:
    """(id, sample, length, finish_reason) rows → one row per id (sorted): lengths, finish_reasons,
    n_samples, n_capped, capped_frac, target. Capped lengths are clipped to `cap` (= the cap)."""
    missing = {"id", "sample", "length", "finish_reason"} - set(rows.columns)
    if missing:
        raise DataError(f"generation rows lack columns {sorted(missing)}")
    if statistic not in STATISTICS:
        raise ConfigError(f"target statistic {statistic!r}: use one of {list(STATISTICS)}")
    df = rows.sort_values(["id", "sample"])
    if df.duplicated(["id", "sample"]).any():
        raise DataError("generation rows hold duplicate (id, sample) pairs")
    lengths = df["length"].astype(int)
    if cap is not None:
        lengths = lengths.where(df["finish_reason"] != "length", cap)
    df = df.assign(length=lengths, capped=df["finish_reason"] == "length")
    g = df.groupby("id", sort=True)
    out = pd.DataFrame({
        "lengths": g["length"].agg(list),
        "finish_reasons": g["finish_reason"].agg(list),
        "n_samples": g.size(),
        "n_capped": g["capped"].sum().astype(int),
    })
    out["capped_frac"] = out["n_capped"] / out["n_samples"]
    out["target"] = [target_statistic(v, statistic) for v in out["lengths"]]
    out.index.name = "id"
    return out


def write_reference(rows: pd.DataFrame, path: Path, meta: Mapping[str, Any]) -> Path:
    """The committed trace: a first line {"meta": {...settings}} then one line per (id, sample), no texts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df = rows.sort_values(["id", "sample"])[list(REFERENCE_COLUMNS)]
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(json.dumps({"meta": dict(meta)}, sort_keys=True) + "\n")
        for r in df.itertuples(index=False):
            f.write(json.dumps({"id": r.id, "sample": int(r.sample), "length": int(r.length),
                                "finish_reason": r.finish_reason, "prompt_tokens": int(r.prompt_tokens)}) + "\n")
    tmp.replace(path)
    return path


def read_reference(path: Path) -> tuple[pd.DataFrame, dict]:
    """(rows, meta) of a reference trace file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no reference trace at {path}; generate one with scripts/generate.py generate=reference")
    lines = path.read_text().splitlines()
    if not lines or "meta" not in json.loads(lines[0]):
        raise DataError(f"{path}: first line must be {{\"meta\": ...}}")
    meta = json.loads(lines[0])["meta"]
    rows = pd.DataFrame([json.loads(line) for line in lines[1:] if line.strip()])
    if meta.get("n_rows") is not None and len(rows) != meta["n_rows"]:
        raise DataError(f"{path}: {len(rows)} rows but its meta says {meta['n_rows']} (truncated trace?)")
    return rows, meta


def reference_samples(path: Path) -> dict[str, list[int]]:
    """id → its sampled lengths (capped ones as the cap) from a reference trace: the noise ceiling's input."""
    rows, _ = read_reference(path)
    if not {"id", "length"} <= set(rows.columns) or rows["length"].isna().any():
        raise DataError(f"{path}: reference trace rows need id and length")
    out: dict[str, list[int]] = {}
    for i, n in zip(rows["id"].astype(str), rows["length"].astype(int), strict=True):
        out.setdefault(i, []).append(int(n))
    return out


def load_targets(cfg, statistic: str | None = None) -> pd.DataFrame:
    """Per-prompt targets for a composed config, indexed by prompt id (see `per_prompt` for columns).

    From the merged generations of `cfg.generate`'s settings when present, else (when
    `generate.targets.use_reference`) from the committed reference trace. `attrs` holds `source`,
    `statistic`, `cap` and the generation `settings`.
    """
    from lengthpred.generate import GenerationSettings, generations_dir, load_generations

    tcfg = cfg.generate.get("targets") or {}
    statistic = statistic or tcfg.get("statistic", "mean")
    settings = GenerationSettings.from_cfg(cfg.generate)
    root = generations_dir(cfg, settings)
    if (root / "merged").is_dir():
        rows = load_generations(root).select_columns(["id", "sample", "length", "finish_reason"]).to_pandas()
        meta, source = settings.hashed(), str(root)
    elif tcfg.get("use_reference", True):
        path = reference_path(cfg)
        rows, meta = read_reference(path)
        meta = meta.get("settings", meta)
        source = str(path)
        why = settings_mismatch(meta, settings.hashed())
        if why:
            raise ConfigError(f"{path}: the reference trace's settings differ from the generate config: {why} "
                              "(set generate.* to the trace's settings, or generate targets for yours)")
    else:
        raise DataError(f"no merged generations at {root} and generate.targets.use_reference is false")
    cap = int(meta["max_new_tokens"])
    out = per_prompt(rows, statistic, cap=cap)
    out.attrs.update(source=source, statistic=statistic, cap=cap, settings=dict(meta))
    return out


def sample_agreement(targets: pd.DataFrame) -> float:
    """Mean pairwise Spearman correlation between sample j and sample k across prompts: the noise
    ceiling of any predictor of a single sample (NaN with fewer than 2 samples)."""
    from itertools import combinations

    from scipy.stats import spearmanr

    n = int(targets["n_samples"].min())
    if n < 2:
        return float("nan")
    mat = np.array([v[:n] for v in targets["lengths"]], dtype=float)  # [prompts, samples]
    return float(np.mean([spearmanr(mat[:, a], mat[:, b]).statistic for a, b in combinations(range(n), 2)]))


def export_reference(cfg, *, allow_partial: bool = False) -> Path:
    """Write the merged generations of `cfg.generate` as the committed reference trace (no texts).

    `allow_partial`: before the merge exists, export the prompts whose samples are all written so far,
    marked `partial: true` in the meta line (for a run cut short; its rerun completes it).
    """
    from lengthpred.generate import GenerationSettings, generations_dir, load_generations
    from lengthpred.generate.store import read_json, read_parts

    root = generations_dir(cfg)
    manifest = read_json(root / "manifest.json", {})
    partial = not (root / "merged").is_dir()
    if partial and not allow_partial:
        raise DataError(f"no merged generations at {root}; finish the run or pass allow_partial")
    if partial:
        rows = read_parts(root).to_pandas()[list(REFERENCE_COLUMNS)]
        n = GenerationSettings.from_cfg(cfg.generate).num_samples
        counts = rows.groupby("id")["sample"].nunique()
        rows = rows[rows["id"].isin(counts.index[counts == n])]
        manifest.update(n_prompts=int(rows["id"].nunique()), n_rows=len(rows),
                        n_capped=int((rows["finish_reason"] == "length").sum()))
    else:
        rows = load_generations(root).select_columns(list(REFERENCE_COLUMNS)).to_pandas()
    meta = {k: manifest.get(k) for k in ("settings", "settings_hash", "model", "data", "dtype", "max_context",
                                          "n_prompts", "n_rows", "n_capped", "n_truncated", "rejected")}
    meta["partial"] = partial
    return write_reference(rows, reference_path(cfg), meta)
