"""Finished CASTILLO fits kept on content fingerprints, so an interrupted or repeated `make castillo` fits again
only what changed (its MiniLM proxy searches take hours on 2 cores; a crash used to lose every fit).

A fit's key hashes what decides its result: the head's label and settings, the fit target, `min_train`, the
content of every row it reads (ids, feature values, texts, datasets, token counts, the target's lengths on
train and val, the test rows it predicts) and the source of the fitting code (the `lengthpred.heads` package
and `lengthpred.crossmodel.fits`). No path or time enters it, so a new run folder, a moved checkout or a copied
feature store still hits. An entry is `<key>.parquet` (test predictions, absent when the fit could not run)
and `<key>.json` (the fit record), the record written last, so a half-written entry is never read; an entry
that cannot be read is fitted again, with a warning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.crossmodel.table import ALL_MODELS, LengthTable
from lengthpred.heads import LabeledSet
from lengthpred.integrity import atomic_write_bytes, atomic_write_text

log = logging.getLogger(__name__)
PARTS = ("train", "val", "test")


def code_digest() -> str:
    """A hash of the fitting code's source files (the heads package and the fits module)."""
    import lengthpred.crossmodel.fits as fits
    import lengthpred.heads as heads

    h = hashlib.sha1()
    files = sorted(Path(heads.__file__).parent.rglob("*.py")) + [Path(fits.__file__)]
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _update_array(h: Any, a: Any) -> None:
    if a is None:
        h.update(b"-")
        return
    a = np.ascontiguousarray(np.asarray(a))
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())


def labeled_digest(h: Any, s: LabeledSet) -> None:
    """Feed every field a head may read from `s` into the hash `h`."""
    x = s.inputs
    h.update(json.dumps([x.ids, x.texts, x.domains]).encode())
    for a in (x.features, x.n_prompt_tokens, s.y, s.n_samples, s.capped_frac):
        _update_array(h, a)


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else str(v)


class FitCache:
    """Fit records and test predictions under `root`, one entry per content key."""

    def __init__(self, root: str | Path, code: str | None = None) -> None:
        self.root = Path(root)
        self.code = code or code_digest()
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
            labeled_digest(h, inputs.labeled(table, ALL_MODELS if part == "test" else target, split[part],
                                             spec.feature))
        return h.hexdigest()[:20]

    def load(self, key: str) -> tuple[dict[str, Any], pd.DataFrame | None] | None:
        """The stored (record, predictions) of `key`, or None (absent or unreadable: fit again)."""
        rec_path, pred_path = self.root / f"{key}.json", self.root / f"{key}.parquet"
        if not rec_path.is_file():
            return None
        try:
            rec = json.loads(rec_path.read_text())
            preds = pd.read_parquet(pred_path) if rec.pop("_has_predictions") else None
        except (OSError, ValueError, KeyError) as e:
            log.warning("fit cache %s: unreadable (%s); fitting again", rec_path, e)
            return None
        self.hits += 1
        return rec, preds

    def store(self, key: str, rec: Mapping[str, Any], preds: pd.DataFrame | None) -> None:
        if preds is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.root / f"{key}.parquet", preds.to_parquet(index=False))
        body = dict(rec) | {"_has_predictions": preds is not None}
        atomic_write_text(self.root / f"{key}.json", json.dumps(body, indent=1, default=_plain) + "\n")
