"""Which within-bin shape a binned head's median should read (issue 25, item 4), per fit target, on its own
validation prompts and on its test prompts.

A binned head (probe, egtp) predicts bin probabilities; its median is where their cdf reaches 0.5, and inside
the bin holding it the mass is uniform (`within_bin="uniform"`) or shaped like the bin's training lengths
(`"training"`, lengthpred.distributions.within_bin_knots). Training is the same under both, so one fit per
target (its first seed, selected on validation as `fits` does) gives both medians and the mean (`predict`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from lengthpred.crossmodel.fits import HeadSpec
from lengthpred.crossmodel.inputs import PromptInputs
from lengthpred.crossmodel.table import ALL_MODELS, LengthTable
from lengthpred.distributions import Histogram
from lengthpred.errors import ConfigError
from lengthpred.heads import HEADS, run_training


def _mae(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.abs(pred - y).mean())


def compare_within_bin(spec: HeadSpec, inputs: PromptInputs, table: LengthTable,
                       split: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """One row per (fit target, part ∈ val/test): the selected setting and the MAE of the mean, of the median
    read uniformly inside its bin and of the median read on the bin's training lengths; the prompts whose
    uniform median lies in the last bin (`n_last_bin`) and the summed |error| the uniform reading adds there
    and over all prompts (`excess_last_bin`, `excess_all`, tokens). The test part is labelled with the target's
    own lengths (each model's), like T7's own-fit rows."""
    if not hasattr(HEADS.get(spec.name), "predict_bins"):
        raise ConfigError(f"within_bin: {spec.name!r} is not a binned head (probe, egtp, estp)")
    settings = spec.settings.replace(params=dict(spec.settings.params) | {"within_bin": "training"}, n_seeds=1)
    rows = []
    for target in spec.targets:
        train = inputs.labeled(table, target, split["train"], spec.feature)
        val = inputs.labeled(table, target, split["val"], spec.feature)
        test_ids = table.ids_with(target, split["test"]) if target != ALL_MODELS else list(split["test"])
        test = inputs.labeled(table, target, test_ids, spec.feature)
        with threadpool_limits(limits=1, user_api="blas"):
            head, m, _ = run_training(spec.name, settings, train, val if len(val) else None, test, split="test")
        for part, s in (("val", val), ("test", test)):
            X = np.asarray(s.inputs.features, dtype=np.float32)
            p = head.predict_bins(X)
            uniform = Histogram(head.bin_edges_, p).quantile([0.5])[:, 0]
            shaped = head.predict_points(X).median
            excess = np.abs(uniform - s.y) - np.abs(shaped - s.y)  # what the uniform reading adds, per prompt
            last = uniform >= head.bin_edges_[-2]  # its median inside the last bin, which reaches the tail's maximum
            rows.append({"head": spec.name, "fit": target, "part": part, "n": len(s),
                         "selected": str(m["selected"] or ""), "binning": head.binning,
                         "mae_mean": _mae(head.predict(X), s.y),
                         "mae_median_uniform": _mae(uniform, s.y), "mae_median_training": _mae(shaped, s.y),
                         "n_last_bin": int(last.sum()), "excess_last_bin": float(excess[last].sum()),
                         "excess_all": float(excess.sum())})
    return pd.DataFrame(rows)
