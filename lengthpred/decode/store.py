"""Read a decode-state store (lengthpred.decode.extract) into arrays: one row per (answer, checkpoint)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open

from lengthpred.errors import DataError
from lengthpred.features.store import MANIFEST, intact_parts, read_skipped
from lengthpred.names import hidden_name


@dataclass
class DecodeSet:
    """Per answer: `ids`, `length`, `capped`, `prompt_tokens`; per checkpoint row: `row_prompt` (index into
    ids), `t` (tokens generated), `X` [rows, d] float32 (the layer's state); `remaining` = length - t."""

    root: Path
    manifest: dict
    ids: list[str]
    length: np.ndarray
    capped: np.ndarray
    prompt_tokens: np.ndarray
    row_prompt: np.ndarray
    t: np.ndarray
    X: np.ndarray

    @property
    def remaining(self) -> np.ndarray:
        return (self.length[self.row_prompt] - self.t).astype(np.float64)

    def rows_of(self, ids: list[str]) -> np.ndarray:
        """Row indices of the answers `ids` (those stored; others are ignored)."""
        want = np.isin(np.asarray(self.ids), np.asarray(list(ids)))
        return np.flatnonzero(want[self.row_prompt])

    def __repr__(self) -> str:
        return f"DecodeSet({len(self.ids)} answers, {len(self.t)} checkpoints, d={self.X.shape[1]}, {self.root})"


def load_decode(path: str | Path) -> DecodeSet:
    """Open a decode store; every expected answer must be stored or listed as skipped."""
    root = Path(path)
    mf = root / MANIFEST
    if not mf.is_file():
        raise DataError(f"no decode-state manifest at {mf}; run scripts/extract_decode.py")
    manifest = json.loads(mf.read_text())
    name = hidden_name(int(manifest["layer"]))
    parts = intact_parts(root)
    skipped = read_skipped(root)
    seen = [pid for _, pids in parts for pid in pids]
    expected = [i for i in manifest["ids"] if i not in skipped]
    missing = sorted(set(expected) - set(seen))
    if missing:
        raise DataError(f"{root}: decode states incomplete, {len(missing)} of {len(expected)} answers missing "
                        f"(e.g. {missing[:3]}); run the missing shards of scripts/extract_decode.py (it resumes)")
    if len(seen) != len(set(seen)):
        raise DataError(f"{root}: answers stored twice")
    ids, length, capped, ptok, row_prompt, ts, xs = [], [], [], [], [], [], []
    for p, pids in parts:
        with safe_open(str(p), framework="np") as f:
            length.append(f.get_tensor("length"))
            capped.append(f.get_tensor("capped"))
            ptok.append(f.get_tensor("prompt_tokens"))
        with safe_open(str(p.with_name(p.name.replace(".safetensors", ".tokens.safetensors"))), framework="pt") as f:
            off = f.get_tensor("offsets").numpy()
            xs.append(f.get_tensor(name).float().numpy())
            ts.append(f.get_tensor("t").numpy())
        row_prompt.append(len(ids) + np.repeat(np.arange(len(pids)), np.diff(off)))
        ids.extend(pids)
    order = np.argsort(ids, kind="stable")  # id-sorted answers, rows in that order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    rp = rank[np.concatenate(row_prompt)]
    t = np.concatenate(ts).astype(np.int64)
    rows = np.lexsort((t, rp))
    return DecodeSet(root, manifest, [ids[k] for k in order], np.concatenate(length)[order].astype(np.int64),
                     np.concatenate(capped)[order].astype(bool), np.concatenate(ptok)[order].astype(np.int64),
                     rp[rows], t[rows], np.concatenate(xs)[rows])
