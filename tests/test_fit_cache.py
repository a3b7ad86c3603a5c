"""The CASTILLO fit cache (lengthpred.crossmodel.fit_cache): keyed on content, so what changes a fit changes its
key and nothing else does; a damaged or mismatched entry is a miss, never a wrong fit."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd

from lengthpred.crossmodel.fit_cache import FitCache, code_digest
from lengthpred.crossmodel.fits import fit_all
from lengthpred.crossmodel.table import LengthTable
from tests.test_crossmodel_within import M1, simpson, specs


def test_the_key_follows_content_not_paths(tmp_path):
    inputs, table, split, _ = simpson()
    spec = specs()[0]
    a, b = FitCache(tmp_path / "a", code="c1"), FitCache(tmp_path / "b", code="c1")
    key = a.key(spec, M1, inputs, table, split, 20)
    assert key == b.key(spec, M1, inputs, table, split, 20)  # another folder, the same key
    assert key != FitCache(tmp_path / "a", code="c2").key(spec, M1, inputs, table, split, 20)
    assert key != a.key(spec, M1, inputs, table, split, 19)
    assert key != a.key(specs()[1], M1, inputs, table, split, 20)  # within-dataset fit of the same head
    longer = LengthTable(table.ids, table.models, table.samples * 1.01)
    assert key != a.key(spec, M1, inputs, longer, split, 20)  # train/val lengths enter the key
    moved = {k: list(v) for k, v in split.items()}
    moved["train"].append(moved["test"].pop())
    assert key != a.key(spec, M1, inputs, table, moved, 20)
    # the test rows' labels are placeholders: another model's lengths leave a fit on M1 unchanged
    other = table.samples.copy()
    other[:, 1] *= 3
    assert key == a.key(spec, M1, inputs, LengthTable(table.ids, table.models, other), split, 20)
    assert len(code_digest()) == 16


def test_damaged_or_mismatched_entries_are_fitted_again(tmp_path, caplog):
    inputs, table, split, _ = simpson()
    cache = FitCache(tmp_path, code="c")
    fresh, preds = fit_all(specs(), inputs, table, split, min_train=5, cache=cache)
    assert not fresh["from_cache"].any() and len(list(tmp_path.glob("*.json"))) == 6
    again, preds2 = fit_all(specs(), inputs, table, split, min_train=5, cache=FitCache(tmp_path, code="c"))
    assert again["from_cache"].all()
    pd.testing.assert_frame_equal(preds2, preds)
    records = sorted(tmp_path.glob("*.json"))
    records[0].write_text("{not json")
    rec = json.loads(records[1].read_text())
    other = next(p for p in records[2:] if json.loads(p.read_text())["_predictions_sha1"] != rec["_predictions_sha1"])
    shutil.copyfile(other.with_suffix(".parquet"), records[1].with_suffix(".parquet"))  # another fit's predictions
    third, preds3 = fit_all(specs(), inputs, table, split, min_train=5, cache=FitCache(tmp_path, code="c"))
    assert int((~third["from_cache"]).sum()) == 2 and "fitting again" in caplog.text
    pd.testing.assert_frame_equal(preds3, preds)
    assert np.isfinite(third["fit_seconds"].astype(float)).all()
