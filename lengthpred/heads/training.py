"""Fit a head on train, select hyperparameters on val, score on test: the library behind scripts/train.py.

Hyperparameter selection: the head config's `select:` maps constructor keywords to candidate lists (its
search space). With a `search:` node (conf/search, lengthpred.heads.search) `search.budget` candidates are
drawn from it at random, the same budget for every head; without one every combination is a candidate.
Each is fitted on train and the one with the best validation Spearman is kept (the first on ties; no refit
on train+val, so val stays a clean selection set); every candidate's val Spearman and fit time go into
metrics["candidates"]. Without a usable val split (absent or < 2 distinct lengths) the configured params
are used as they are.

Seeds: with `n_seeds > 1` the whole fit-and-select procedure runs once per seed (`random_state`,
`random_state + 1`, …; lengthpred.seeds). The first seed's head is the one returned, saved and scored
with a bootstrap CI; every seed's test predictions go into the predictions frame (`y_pred_seed<i>`) and
its test scores into `metrics["seeds"]`, summarised as `<metric>_seed_mean` / `<metric>_seed_sd`.

Points: test predictions come from `predict_points`, so predictions.parquet carries each head's median
(`y_pred_median`) and mean (`y_pred_mean`) beside `y_pred`, and the scores put MAE on the median (`mae`)
and on the mean (`mae_mean`); rank metrics read `y_pred`.

Validation predictions: given `val_split`, the frame also holds every val prompt predicted by the head that
was kept (and each seed's), so later steps that choose on validation (a stacked ensemble,
lengthpred.heads.stacking) read the same split the head was selected on, never test. They are not clean
held-out rows for the head's own score: its hyperparameters were chosen on them.

Censoring (one rule for every head): a capped generation counts as the cap, a lower bound; prompts
with any capped sample are counted in `n_capped_*` of the metrics.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.heads.base import HEADS, POINT_KINDS, BaseHead, LabeledSet, Points
from lengthpred.heads.search import SearchSettings, sample_candidates, search_rows, space, space_size, subset
from lengthpred.heads.settings import HeadSettings
from lengthpred.metrics import METRICS, is_undefined
from lengthpred.seeds import (
    POINT_COLUMNS,
    SEED_METRICS,
    seed_column,
    seed_columns,
    seed_list,
    seed_metric_name,
    spread,
)

PREDICTION_COLUMNS = ["head", "split", "id", "domain", "y_true", "y_pred", "n_samples", "capped_frac"]

log = logging.getLogger(__name__)


def build_head(name: str, **params: Any) -> BaseHead:
    """A fresh head by registry name; a keyword the head does not take is a ConfigError listing valid ones."""
    klass = HEADS.get(name)
    valid = set(klass().get_params())
    unknown = sorted(set(params) - valid)
    if unknown:
        raise ConfigError(f"head {name!r} takes no {unknown}; valid keys: {sorted(valid)}")
    return klass(**params)


def validate_set(split: str, data: LabeledSet, head_cls: type[BaseHead], *, need_ranking: bool) -> None:
    """Every check that must pass before any training starts (DataError naming the split)."""
    n = len(data)
    y = np.asarray(data.y, dtype=np.float64)
    if y.shape != (n,):
        raise DataError(f"{split}: {n} prompts but {y.size} targets (shape {y.shape})")
    if n == 0:
        raise DataError(f"{split}: no prompts")
    if not np.all(np.isfinite(y)) or np.any(y < 0):
        raise DataError(f"{split}: targets must be finite lengths >= 0")
    x = data.inputs.x_for(head_cls.input_kind)
    if len(x) != n:
        raise DataError(f"{split}: {len(x)} {head_cls.input_kind} rows but {n} targets")
    if head_cls.input_kind == "features":
        x = np.asarray(x)
        if x.ndim != 2:
            raise DataError(f"{split}: features must be [n, d], got shape {x.shape}")
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            ids = [data.inputs.ids[i] for i in np.flatnonzero(bad)[:3]]
            raise DataError(f"{split}: {int(bad.sum())} prompts have NaN/inf features (e.g. {ids})")
    if head_cls.input_kind == "tokens":
        bad = [i for i, r in enumerate(x) if np.ndim(r) != 2 or len(r) == 0 or not np.isfinite(r).all()]
        if bad:
            ids = [data.inputs.ids[i] for i in bad[:3]]
            raise DataError(f"{split}: {len(bad)} prompts have empty or NaN/inf token inputs (e.g. {ids})")
    if need_ranking and len(np.unique(y)) < 2:
        raise DataError(f"{split}: fewer than 2 distinct lengths, so rank metrics are undefined")


def score(y_true: np.ndarray, y_pred: np.ndarray | Points) -> dict[str, float | None]:
    """spearman, kendall, mae (None where undefined, e.g. a constant prediction's correlations). Given a head's
    `Points`, the correlations read `pred`, `mae` the median (`pred` where the head has none) and `mae_mean`
    the mean (None where it has none)."""
    points = y_pred if isinstance(y_pred, Points) else None
    pred = points.pred if points is not None else y_pred
    out: dict[str, float | None] = {}
    for name in ("spearman", "kendall", "mae"):
        metric = METRICS.get(name)
        chosen = points.get(metric.rewards) if points is not None and metric.rewards else None
        v = metric(y_true, pred if chosen is None else chosen)
        out[name] = None if is_undefined(v) else float(v)
    if points is not None:
        v = METRICS.get("mae")(y_true, points.mean) if points.mean is not None else None
        out["mae_mean"] = None if v is None or is_undefined(v) else float(v)
    return out


def frame_points(g: pd.DataFrame, seed: int | None = None) -> np.ndarray | Points:
    """A predictions frame's (or one seed's) predictions as `Points` where the frame records them (a point
    NaN anywhere in `g` counts as absent), else the plain `y_pred` array (files written before points)."""
    pred_col = "y_pred" if seed is None else seed_column(seed)
    cols = {k: POINT_COLUMNS[k] if seed is None else seed_column(seed, k) for k in POINT_KINDS}
    pred = g[pred_col].to_numpy(dtype=np.float64)
    if not any(c in g.columns for c in cols.values()):
        return pred
    values = {k: g[c].to_numpy(dtype=np.float64) if c in g.columns else None for k, c in cols.items()}
    return Points(pred, *(v if v is not None and np.isfinite(v).all() else None for v in values.values()))


def _candidates(select: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    if not select:
        return [{}]
    keys = list(select)
    values = [list(select[k]) if isinstance(select[k], (list, tuple)) else [select[k]] for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def predictions_frame(
    head: str,
    split: str | Sequence[str],
    data: LabeledSet,
    y_pred: np.ndarray | Points,
    seed_preds: Sequence[np.ndarray | Points] = (),
) -> pd.DataFrame:
    """Rows of predictions.parquet (docs/DESIGN.md "Predictions file"); `split`: one name or one per row;
    `y_pred`: the head's `Points` (then `y_pred_median` and `y_pred_mean` columns too, NaN for a point the
    head has none of) or a plain array; `seed_preds`: every seed's predictions (first seed first), written
    as `y_pred_seed<i>` columns (and `y_pred_median_seed<i>`, `y_pred_mean_seed<i>` for `Points`)."""
    n = len(data)
    points = y_pred if isinstance(y_pred, Points) else None
    if points is not None:
        y_pred = points.pred
    domains = data.inputs.domains if data.inputs.domains is not None else [""] * n
    frame = pd.DataFrame(
        {
            "head": head,
            "split": split if isinstance(split, str) else list(split),
            "id": list(data.inputs.ids),
            "domain": list(domains),
            "y_true": np.asarray(data.y, dtype=np.float64),
            "y_pred": np.asarray(y_pred, dtype=np.float64),
            "n_samples": np.asarray(
                data.n_samples if data.n_samples is not None else np.ones(n), dtype=np.int64
            ),
            "capped_frac": np.asarray(
                data.capped_frac if data.capped_frac is not None else np.zeros(n), dtype=np.float64
            ),
        },
        columns=PREDICTION_COLUMNS,
    )
    if points is not None:
        for kind in POINT_KINDS:
            frame[POINT_COLUMNS[kind]] = _point_values(points, kind, n)
    for i, pred in enumerate(seed_preds):
        if isinstance(pred, Points):
            frame[seed_column(i)] = pred.pred
            for kind in POINT_KINDS:
                frame[seed_column(i, kind)] = _point_values(pred, kind, n)
        else:
            frame[seed_column(i)] = np.asarray(pred, dtype=np.float64)
    return frame


def _point_values(points: Points, kind: str, n: int) -> np.ndarray:
    value = points.get(kind)
    return np.full(n, np.nan) if value is None else value


def _n_capped(data: LabeledSet | None) -> int:
    if data is None or data.capped_frac is None:
        return 0
    return int(np.sum(np.asarray(data.capped_frac) > 0))


QUANTILE_COLUMNS = {0.1: "y_q10", 0.5: "y_q50", 0.9: "y_q90"}  # distributional heads' quantiles in predictions


def fit_head(head: BaseHead, x: Any, data: LabeledSet) -> BaseHead:
    """`head.fit(x, data.y)`; a head that `fits_samples` is fitted on every sampled length instead (a row per
    sample, a capped one right-censored) when the set carries them (targets with lengths and finish reasons)."""
    if type(head).fits_samples and data.sample_lengths is not None:
        rows, y, capped = data.long()
        return head.fit(np.asarray(x)[rows], y, censored=capped)
    return head.fit(x, data.y)


def quantile_columns(head: BaseHead, x: Any) -> dict[str, np.ndarray]:
    """The q0.1 / q0.5 / q0.9 columns of a distributional head's predictions (none for a point head)."""
    if not type(head).predicts_distribution:
        return {}
    q = head.predict_quantiles(x, list(QUANTILE_COLUMNS))
    return {c: q[:, k] for k, c in enumerate(QUANTILE_COLUMNS.values())}


def _fit_selected(
    head_name: str,
    params: dict[str, Any],
    candidates: list[dict[str, Any]],
    train: LabeledSet,
    val: LabeledSet | None,
    use_val: bool,
    rows: list[int] | None = None,
) -> tuple[float, BaseHead, dict[str, Any], list[dict[str, Any]]]:
    """Fit every candidate on train (on its `rows` alone when given, then the chosen one refitted on all of
    train) and keep the best validation Spearman (the first candidate alone without a usable val split):
    (val Spearman or NaN, fitted head, chosen candidate, one record per candidate scored)."""
    kind = HEADS.get(head_name).input_kind
    fit_set = subset(train, rows) if rows is not None else train
    x_train = fit_set.inputs.x_for(kind)
    best: tuple[float, BaseHead, dict[str, Any]] | None = None
    records: list[dict[str, Any]] = []
    for cand in candidates if use_val else candidates[:1]:
        t0 = time.perf_counter()
        head = fit_head(build_head(head_name, **(params | cand)), x_train, fit_set)
        if not use_val:
            return math.nan, head, cand, records
        assert val is not None
        rho = score(val.y, head.predict(val.inputs.x_for(kind)))["spearman"]
        secs = round(time.perf_counter() - t0, 3)
        records.append({"params": cand, "val_spearman": rho, "fit_seconds": secs})
        rho = -math.inf if rho is None else rho
        if best is None or rho > best[0]:
            best = (rho, head, cand)
    assert best is not None
    if rows is not None:  # searched on a subsample: the chosen candidate is refitted on all train prompts
        head = fit_head(build_head(head_name, **(params | best[2])), train.inputs.x_for(kind), train)
        rho = score(val.y, head.predict(val.inputs.x_for(kind)))["spearman"]
        best = (-math.inf if rho is None else rho, head, best[2])
    return (*best, records)


def _seed_params(head_name: str, params: dict[str, Any], n_seeds: int) -> list[dict[str, Any]]:
    """One params dict per seed; more than one seed needs a head with a `random_state`."""
    if n_seeds == 1:
        return [params]
    if "random_state" not in HEADS.get(head_name)().get_params():
        raise ConfigError(f"head {head_name!r} has no random_state: n_seeds={n_seeds} would refit one model")
    return [params | {"random_state": s} for s in seed_list(params.get("random_state", 0), n_seeds)]


def run_training(
    head_name: str,
    settings: HeadSettings,
    train: LabeledSet,
    val: LabeledSet | None,
    test: LabeledSet,
    *,
    split: str | Sequence[str] = "test",
    label: str | None = None,
    n_seeds: int = 1,
    val_split: str | Sequence[str] | None = None,
) -> tuple[BaseHead, dict[str, Any], pd.DataFrame]:
    """Fit `head_name` on train (selecting `settings.select` on val), predict test; with `n_seeds > 1`, the
    same per seed (module docstring), keeping the first seed's head.

    Returns (fitted head, metrics dict, predictions DataFrame with one row per test prompt, split name(s)
    `split` (one, or one per test row), head name `label or head_name`; with `val_split`, also one row per
    val prompt under that name or names). All data checks run before the first fit.
    """
    if not isinstance(settings, HeadSettings):
        raise TypeError(f"run_training takes HeadSettings (HeadSettings.from_mapping), not {type(settings).__name__}")
    klass = HEADS.get(head_name)
    params, search = dict(settings.params), settings.search
    if search is None:
        candidates = _candidates(settings.select)
    else:
        candidates = sample_candidates(head_name, settings.select, search)
    for cand in candidates:
        build_head(head_name, **(params | cand)).check_config()  # bad keys and set-ups fail before any work
    seed_params = _seed_params(head_name, params, int(n_seeds))
    validate_set("train", train, klass, need_ranking=False)
    validate_set("test", test, klass, need_ranking=True)
    use_val = val is not None and len(val) > 0 and len(candidates) > 1
    val_rows = val_split is not None and val is not None and len(val) > 0
    if use_val or val_rows:
        assert val is not None
        validate_set("val", val, klass, need_ranking=False)
        use_val = use_val and len(np.unique(val.y)) >= 2
    if klass.input_kind == "features":
        d = {
            s: np.asarray(v.inputs.features).shape[1]
            for s, v in (("train", train), ("test", test), ("val", val))
            if v
        }
        if len(set(d.values())) > 1:
            raise DataError(f"feature widths differ between splits: {d}")

    x_test = test.inputs.x_for(klass.input_kind)
    rows = search_rows(len(train), search) if search is not None and use_val else None
    fits: list[tuple[float, BaseHead, dict[str, Any], Points, float]] = []
    records: list[dict[str, Any]] = []
    # choices a head makes after its fit, on validation (never test): only heads that define some
    tunes = klass.tune_on_validation is not BaseHead.tune_on_validation
    tune_val = val if tunes and val is not None and len(val) > 0 else None
    if tune_val is not None and not (use_val or val_rows):
        validate_set("val", tune_val, klass, need_ranking=False)
    elif tunes and tune_val is None and seed_params and seed_params[0].get("within_bin") == "validation":
        log.warning("%s: within_bin=validation but no validation split: its bins are read uniformly", head_name)
    for p in seed_params:
        t0 = time.perf_counter()
        val_rho, head, chosen, recs = _fit_selected(head_name, p, candidates, train, val, use_val, rows)
        if tune_val is not None:
            head.tune_on_validation(tune_val.inputs.x_for(klass.input_kind), tune_val.y)
        fits.append((val_rho, head, chosen, head.predict_points(x_test), time.perf_counter() - t0))
        records += [{"random_state": p.get("random_state"), **r} for r in recs]
    val_rho, head, chosen, y_pred, fit_seconds = fits[0]
    metrics: dict[str, Any] = {
        **score(test.y, y_pred),
        "head": label or head_name,
        "layer": settings.layer,
        "pooling": _listed(settings.pooling),
        "feature": _listed(settings.feature),
        "n_train": len(train),
        "n_val": len(val) if val is not None else 0,
        "n_test": len(test),
        "n_parameters": head.n_parameters,
        "n_capped": _n_capped(train) + _n_capped(val) + _n_capped(test),
        "n_capped_train": _n_capped(train),
        "n_capped_test": _n_capped(test),
        "censoring": ("every sampled length a row, a capped one right-censored at the cap"
                      if klass.fits_samples and train.sample_lengths is not None
                      else "capped samples count as the cap (lower bound)"),
        "params": head.get_params(),
        "selected": chosen,
        "within_bin": getattr(head, "within_bin_", None),  # the binned heads' reading (chosen on val under "validation")
        "val_spearman": val_rho if math.isfinite(val_rho) else None,
        "n_candidates": len(candidates) if use_val else 1,
        "fit_seconds": round(fit_seconds, 3),
        "candidates": records,
        "search": _search_record(search, settings.select, candidates, use_val, len(train), rows),
    }
    seed_preds: list[np.ndarray] = []
    if len(fits) > 1:
        metrics |= _seed_summary(test.y, fits)
        seed_preds = [f[3] for f in fits]
    frame = predictions_frame(label or head_name, split, test, y_pred, seed_preds).assign(
        **quantile_columns(head, x_test))
    if val_rows:
        assert val is not None and val_split is not None
        x_val = val.inputs.x_for(klass.input_kind)
        val_preds = [f[1].predict_points(x_val) for f in fits]
        val_frame = predictions_frame(label or head_name, val_split, val, val_preds[0], val_preds if len(fits) > 1 else ())
        frame = pd.concat([frame, val_frame.assign(**quantile_columns(head, x_val))], ignore_index=True)
    return head, metrics, frame


def _listed(value: Any) -> Any:
    """A settings tuple as the list metrics.json has always held (other values unchanged)."""
    return list(value) if isinstance(value, tuple) else value


def _search_record(
    search: SearchSettings | None,
    select: Mapping[str, Any] | None,
    candidates: list[dict[str, Any]],
    use_val: bool,
    n_train: int,
    rows: list[int] | None,
) -> dict[str, Any] | None:
    """metrics.json `search`: the protocol a fit ran under (None: no search, e.g. a head with no space)."""
    if not use_val or not select:
        return None
    return {
        "protocol": "random" if search is not None else "grid",
        "budget": search.budget if search is not None else len(candidates),
        "seed": search.seed if search is not None else None,
        "space": space(select),
        "space_size": space_size(select),
        "subsample": search.subsample if search is not None else None,
        "n_search_train": len(rows) if rows is not None else n_train,
        "refit_on_all_train": rows is not None,
    }


def _seed_summary(y_test: np.ndarray, fits: Sequence[tuple]) -> dict[str, Any]:
    """metrics.json keys of a multi-seed fit: per-seed test scores and their mean ± sd."""
    per_seed = [
        {
            "random_state": head.get_params()["random_state"],
            **score(y_test, y_pred),
            "val_spearman": rho if math.isfinite(rho) else None,
            "selected": chosen,
            "within_bin": getattr(head, "within_bin_", None),
            "fit_seconds": round(secs, 3),
        }
        for rho, head, chosen, y_pred, secs in fits
    ]
    out: dict[str, Any] = {"n_seeds": len(fits), "seeds": per_seed}
    for m in SEED_METRICS:
        sp = spread([s[m] for s in per_seed])
        out[seed_metric_name(m, "mean")] = sp.mean if math.isfinite(sp.mean) else None
        out[seed_metric_name(m, "sd")] = sp.sd if math.isfinite(sp.sd) else None
    out["fit_seconds_seeds"] = round(sum(f[4] for f in fits), 3)
    return out


def per_domain_scores(preds: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Scores per domain (first seed), with mean ± sd over seeds when the frame has seed columns."""
    out = {}
    cols = seed_columns(preds.columns)
    for dom, g in preds.groupby("domain"):
        m: dict[str, Any] = {}
        if g["y_true"].nunique() > 1:
            m = score(g["y_true"].to_numpy(), frame_points(g))
            per_seed = [score(g["y_true"].to_numpy(), frame_points(g, i)) for i in range(len(cols))]
            for metric in SEED_METRICS if len(cols) > 1 else ():
                sp = spread([s[metric] for s in per_seed])
                m[seed_metric_name(metric, "mean")] = sp.mean
                m[seed_metric_name(metric, "sd")] = sp.sd
        out[str(dom)] = {**m, "n": len(g)}
    return out
