"""Score every (head, fit target) on every model's test prompts: T7's rows with CIs, and the transfer matrix.

Tidy rows: head, fit (the lengths it was trained on: a model or `all-models`), model (whose test lengths
it is scored against), dataset (`pooled` or one dataset), metric, value, ci_low, ci_high, n, note.
- Own fits (fit = model) and all-models fits get Spearman, Kendall τ and MAE with a seeded bootstrap CI,
  pooled and per dataset, and mean ± sd over seeds where the head ran several. MAE scores the median where the
  fit recorded one (`mae_mean` the mean beside it), as bench T1 does; `y_pred` otherwise.
- Transfer cells (fit ≠ model) get the pooled Spearman point estimate only (the heatmap).
- A (model, dataset) with fewer than `min_test` test prompts, or a fit that did not run, is a row whose
  `note` says so: never a silently missing cell. Undefined metrics (a constant's Spearman) are UNDEFINED.
- A `(pooled fit)` head (lengthpred.crossmodel.fits) is scored pooled only: its ranking inside one dataset
  is a slope learnt across datasets. A `(within dataset)` head predicts each dataset from that dataset's
  own fit; a dataset it could not fit is a row that says so, and its pooled row covers the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.crossmodel.ceilings import POOLED
from lengthpred.crossmodel.fits import POOLED_FIT
from lengthpred.crossmodel.table import ALL_MODELS, LengthTable
from lengthpred.eval.results import point_estimates
from lengthpred.metrics import METRICS as METRICS_BY_NAME
from lengthpred.metrics import UNDEFINED, evaluate, is_undefined
from lengthpred.seeds import SEED_METRICS, seed_columns, seed_metric_name, spread

COLUMNS = ["head", "fit", "model", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
METRICS = ("spearman", "kendall", "mae")
NO_TEST = "too few test prompts"  # + " (n)"
NOT_IN_DATASET = "not fitted in this dataset"
PART_POOLED = "pooled over the datasets it was fitted in"


def _row(head: str, fit: str, model: str, dataset: str, metric: str, value: Any = None, lo: Any = None,
         hi: Any = None, n: int = 0, note: str = "") -> dict[str, Any]:
    return dict(zip(COLUMNS, (head, fit, model, dataset, metric, value, lo, hi, int(n), note), strict=True))


def score_cell(head: str, fit: str, model: str, dataset: str, y: np.ndarray, pred: pd.DataFrame, *,
               n_boot: int, seed: int) -> list[dict[str, Any]]:
    """Rows of one (head, fit, model, dataset) from aligned targets `y` and predictions `pred`: each metric on
    the point it rewards where the fit recorded it (MAE on the median, and `mae_mean` on the mean; bench T1's
    rule, `lengthpred.eval.results.point_estimates`), `y_pred` otherwise."""
    g = pred.assign(y_true=np.asarray(y, dtype=float))
    rows = [_row(head, fit, model, dataset, m, e.value, e.ci_low, e.ci_high, e.n,
                 "undefined" if is_undefined(e.value) else "")
            for m, e in point_estimates(g, METRICS, n_boot=n_boot, seed=seed)]
    cols = [c for c in seed_columns(pred.columns) if pred[c].notna().all()]
    if len(cols) > 1:
        for m in SEED_METRICS:
            point = METRICS_BY_NAME.get(m).rewards
            own = [c for c in seed_columns(pred.columns, point) if pred[c].notna().all()] if point else []
            values = [evaluate(y, pred[c].to_numpy(), [m], n_boot=0)[m].value
                      for c in (own if len(own) == len(cols) else cols)]
            sp = spread([None if is_undefined(v) else v for v in values])
            for stat in ("mean", "sd"):
                v = getattr(sp, stat)
                rows.append(_row(head, fit, model, dataset, seed_metric_name(m, stat),
                                 v if math.isfinite(v) else UNDEFINED, n=len(y), note=f"{len(cols)} seeds"))
    return rows


def score_all(preds: pd.DataFrame, fits: pd.DataFrame, table: LengthTable, test_ids: Sequence[str],
              dataset_of: Mapping[str, str], *, n_boot: int = 1000, seed: int = 0,
              min_test: int = 10) -> pd.DataFrame:
    """Every row of the module docstring for the fits in `fits` and the predictions in `preds`."""
    datasets = sorted({dataset_of[i] for i in test_ids})
    by_fit = {k: g.set_index("id") for k, g in preds.groupby(["head", "fit"], sort=False)}
    rows: list[dict[str, Any]] = []
    for rec in fits.to_dict("records"):
        head, fit = rec["head"], rec["fit"]
        g = by_fit.get((head, fit))
        for model in table.models:
            own = fit in (model, ALL_MODELS)
            if g is None:
                rows.append(_row(head, fit, model, POOLED, "spearman", note=str(rec["status"])))
                continue
            per_dataset = own and not str(head).endswith(POOLED_FIT)
            for ds in [POOLED, *datasets] if per_dataset else [POOLED]:
                ids = table.ids_with(model, [i for i in test_ids if ds == POOLED or dataset_of[i] == ds])
                have = [i for i in ids if i in g.index]
                if ds != POOLED and len(have) < len(ids):
                    rows.append(_row(head, fit, model, ds, "spearman", n=len(ids), note=NOT_IN_DATASET))
                    continue
                ids, note = have, PART_POOLED if len(have) < len(ids) else ""
                if len(ids) < min_test:
                    rows.append(_row(head, fit, model, ds, "spearman", n=len(ids), note=f"{NO_TEST} ({len(ids)})"))
                    continue
                y, p = table.target(model, ids), g.loc[ids]
                if own:
                    cell = score_cell(head, fit, model, ds, y, p, n_boot=n_boot, seed=seed)
                    rows += [r | {"note": r["note"] or note} for r in cell]
                else:
                    rows += [r for r in score_cell(head, fit, model, ds, y, p[["y_pred"]], n_boot=0, seed=seed)
                             if r["metric"] == "spearman"]
    return pd.DataFrame(rows, columns=COLUMNS)


def transfer_matrix(results: pd.DataFrame, head: str, models: Sequence[str], metric: str = "spearman") -> pd.DataFrame:
    """Rows: fit target (each model, then all-models); columns: the model scored; pooled test `metric`
    (NaN where undefined, not fitted or too few test prompts)."""
    r = results[(results["head"] == head) & (results["metric"] == metric) & (results["dataset"] == POOLED)]
    cells = {(x.fit, x.model): x.value for x in r.itertuples(index=False)}
    fits = [m for m in models if any(k[0] == m for k in cells)] + (
        [ALL_MODELS] if any(k[0] == ALL_MODELS for k in cells) else [])

    def num(v: Any) -> float:
        return float("nan") if v is None or is_undefined(v) else float(v)

    return pd.DataFrame([[num(cells.get((f, m))) for m in models] for f in fits], index=fits, columns=list(models))


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if is_undefined(v):
        return "undefined"
    return format(float(v), ".10g")


def write_results(df: pd.DataFrame, path: str | Path) -> Path:
    """CSV sorted by key; numbers with 10 significant digits, `undefined` spelled out: same inputs, same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = df.loc[:, COLUMNS].copy()
    for c in ("value", "ci_low", "ci_high"):
        out[c] = [_fmt(v) for v in out[c]]
    out.sort_values(["head", "fit", "model", "dataset", "metric"], kind="stable").to_csv(
        path, index=False, lineterminator="\n")
    return path
