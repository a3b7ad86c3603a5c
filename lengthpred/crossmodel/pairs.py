"""Two CASTILLO heads compared paired, on the same test prompts: for every fit target both heads were fitted on,
and every model that fit is scored on (every model for an all-models fit, the model itself for an own fit), the
difference of their seed means in Spearman and in MAE (each on the point it rewards) with a paired percentile
bootstrap interval over prompts and a one-sided bootstrap p (lengthpred.eval.seed_pairs.compare_seed_means, as
the bench compares lora with the probe).

The interval resamples prompts only, given the seeds that were fitted: a head with one seed carries no seed noise.
The models share their test prompts, so the rows of one all-models fit are not independent: each row is its
own comparison, and no count over models is a test.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.crossmodel.table import ALL_MODELS, LengthTable, short_model
from lengthpred.errors import ConfigError, DataError
from lengthpred.eval.render import Cell, Column, Table
from lengthpred.eval.seed_pairs import compare_seed_means
from lengthpred.seeds import POINT_COLUMNS, seed_columns

log = logging.getLogger(__name__)
COLUMNS = ["head", "reference", "fit", "model", "metric", "scored", "reference_scored", "n_seeds", "seed_mean",
           "seed_sd", "reference_n_seeds", "reference_mean", "reference_sd", "diff", "ci_low", "ci_high", "p_value",
           "n", "note"]
TOO_FEW = "too few shared test prompts"  # + " (n)"


def parse_pairs(pairs: Any, targets: Mapping[str, Sequence[str]], known: Sequence[str]) -> list[tuple[str, str]]:
    """`crossmodel.pairs` as (head, reference) tuples, checked before any work: a pair that is not two different
    heads, or names no head at all, is refused in one line; a pair of heads this run does not fit (a narrower run,
    e.g. `crossmodel.proxy_heads=[]`) is left out with a warning; two heads with no fit target in common are
    refused. `targets`: each configured head's fit targets; `known`: every head name."""
    out = []
    for p in list(pairs or []):
        pair = [p] if isinstance(p, str) else [str(h) for h in p]
        if len(pair) != 2 or pair[0] == pair[1]:
            raise ConfigError(f"crossmodel.pairs: {pair} is not a pair of two different heads, e.g. [lora, probe] "
                              "(the head, then the reference)")
        unknown = [h for h in pair if h not in known]
        if unknown:
            raise ConfigError(f"crossmodel.pairs: {unknown} is not a head (known: {sorted(known)})")
        absent = [h for h in pair if h not in targets]
        if absent:
            log.warning("crossmodel.pairs: %s left out: %s not fitted in this run", pair, absent)
            continue
        if not set(targets[pair[0]]) & set(targets[pair[1]]):
            raise ConfigError(f"crossmodel.pairs: {pair[0]} and {pair[1]} share no fit target "
                              f"({sorted(targets[pair[0]])} against {sorted(targets[pair[1]])}): nothing to pair")
        out.append((pair[0], pair[1]))
    return out


def _frame(g: pd.DataFrame, ids: Sequence[str], y: Sequence[float]) -> pd.DataFrame:
    """The head's rows for `ids` with the target. Columns empty on them are another head's (`preds` holds every
    head) and are left out; a median or mean missing for some prompt is left out too (the point prediction is
    scored instead, and the table says so); a point prediction or a seed missing for some prompt is refused."""
    rows = g.set_index("id").loc[list(ids)].dropna(axis=1, how="all")
    if "y_pred" not in rows.columns:
        raise DataError(f"no prediction for any of the {len(rows)} prompts")
    partial = [c for c in rows.columns if rows[c].isna().any()]
    seeds = {*seed_columns(rows.columns), *(c for k in POINT_COLUMNS for c in seed_columns(rows.columns, k))}
    bad = [c for c in partial if c == "y_pred" or c in seeds]
    if bad:
        raise DataError(f"{bad[0]} is missing for {int(rows[bad[0]].isna().sum())} of {len(rows)} prompts")
    return rows.drop(columns=partial).reset_index().assign(y_true=list(y), split="test")


def _note_row(head: str, ref: str, fit: str, model: str, n: int, note: str) -> dict[str, Any]:
    return {"head": head, "reference": ref, "fit": fit, "model": model, "metric": "spearman", "n": n, "note": note}


def compare_pairs(preds: pd.DataFrame, table: LengthTable, test_ids: Sequence[str],
                  pairs: Sequence[tuple[str, str]], *, min_test: int = 10, n_boot: int = 1000,
                  seed: int = 0) -> pd.DataFrame:
    """One row per pair × shared fit target × scored model × metric (COLUMNS); a (fit, model) that cannot be
    compared (too few shared prompts, a missing prediction) is one row whose `note` says why."""
    by_fit = {k: g for k, g in preds.groupby(["head", "fit"], sort=False)}
    rows: list[dict[str, Any]] = []
    for head, ref in pairs:
        for fit in [f for (h, f) in by_fit if h == head and (ref, f) in by_fit]:
            a, b = by_fit[(head, fit)], by_fit[(ref, fit)]
            shared = set(a["id"]) & set(b["id"])
            for model in table.models if fit == ALL_MODELS else [fit]:
                ids = [i for i in table.ids_with(model, test_ids) if i in shared]
                if len(ids) < min_test:
                    rows.append(_note_row(head, ref, fit, model, len(ids), f"{TOO_FEW} ({len(ids)})"))
                    continue
                y = table.target(model, ids)
                try:
                    df = compare_seed_means({head: [_frame(a, ids, y)], ref: [_frame(b, ids, y)]}, ref, ["test"],
                                            n_boot=n_boot, seed=seed)
                except DataError as e:
                    rows.append(_note_row(head, ref, fit, model, len(ids), f"not compared: {e}"))
                    continue
                for metric, g in df.groupby("metric", sort=False):
                    r, q = g.set_index("head").loc[head], g.set_index("head").loc[ref]
                    rows.append({"head": head, "reference": ref, "fit": fit, "model": model, "metric": metric,
                                 "scored": r.scored, "reference_scored": q.scored, "n_seeds": int(r.n_seeds),
                                 "seed_mean": r.seed_mean, "seed_sd": r.seed_sd,
                                 "reference_n_seeds": int(q.n_seeds), "reference_mean": q.seed_mean,
                                 "reference_sd": q.seed_sd, "diff": r.diff_vs_reference, "ci_low": r.ci_low,
                                 "ci_high": r.ci_high, "p_value": r.p_value, "n": int(r.n), "note": ""})
    return pd.DataFrame(rows, columns=COLUMNS)


def _number(v: Any, kind: str) -> str:
    return "undefined" if v is None or not np.isfinite(float(v)) else Table.number(v, kind)


def _mean_sd(mean: Any, sd: Any, kind: str) -> str:
    text = _number(mean, kind)
    return f"{text} ± {_number(sd, kind)}" if text != "undefined" and sd is not None and math.isfinite(sd) else text


def _p(p: Any, n_boot: int) -> str:
    if p is None or not np.isfinite(float(p)):
        return "undefined"
    return f"< {1 / n_boot:.3g}" if p == 0 and n_boot else f"{float(p):.3f}"


def table_t7_pairs(df: pd.DataFrame, n_boot: int) -> Table:
    """T7_pairs: each row of `compare_pairs`, the difference with its interval (or the row's note)."""
    cols = [Column("Head"), Column("Reference"), Column("Fit"), Column("Model"),
            Column("Metric (prediction scored: head, reference)"), Column("Head's seeds"),
            Column("Head (seed mean ± sd)"), Column("Reference's seeds"), Column("Reference (seed mean ± sd)"),
            Column("Head − reference [95% CI]"), Column("p (one-sided, bootstrap)"), Column("n test", None, "int")]
    rows = []
    for r in df.itertuples():
        fit = "all-models fit" if r.fit == ALL_MODELS else "own fit"
        if r.note:
            rows.append([r.head, r.reference, fit, short_model(r.model), r.note, None, None, None, None, None, None,
                         r.n])
            continue
        kind = "corr" if r.metric == "spearman" else "tokens"
        label = "Spearman" if r.metric == "spearman" else "MAE (tokens)"
        diff = Cell(r.diff, r.ci_low, r.ci_high, kind) if np.isfinite(r.diff) else "undefined"
        rows.append([r.head, r.reference, fit, short_model(r.model), f"{label} ({r.scored}, {r.reference_scored})",
                     str(r.n_seeds), _mean_sd(r.seed_mean, r.seed_sd, kind), str(r.reference_n_seeds),
                     _mean_sd(r.reference_mean, r.reference_sd, kind), diff, _p(r.p_value, n_boot), r.n])
    notes = ["The same test prompts for both heads (each model's prompts that have its 10 samples, and both heads' "
             "predictions); target: the mean of the 10 sampled lengths. Each head's seeds are averaged on the metric; "
             "the interval is a paired percentile bootstrap over prompts, every seed of both heads scored on each "
             "resample, so it carries the prompts' noise, not the seeds' (a head with one seed has no spread). "
             "p: the share of resamples where the head is not better.",
             "Spearman: higher is better, a positive difference favours the head. MAE: lower is better, a negative "
             "difference favours the head; it scores each seed's median where the fit recorded one, else its one "
             "prediction (the metric column says which, for the head and the reference).",
             "Own fit: trained on that model's lengths and scored on them; all-models fit: trained once on the mean "
             "over models and scored on every model. The models share their prompts, so the rows of one "
             "all-models fit are not independent, and no count over them is a test."]
    return Table("T7_pairs", "Two heads compared paired on CASTILLO's test prompts", cols, rows, notes)
