"""T7 and its companions from the tidy cross-model results (lengthpred.crossmodel.scoring) and ceilings.

- `T7`: per model × predictor, pooled over datasets: Spearman, Kendall τ and MAE with CIs, the
  mean-of-10 ceiling on the same test prompts, and the share of the ceiling reached.
- `T7_summary`: one row per model: its ceiling and each predictor's pooled Spearman.
- `T7_datasets`: per model × dataset, the same for the primary predictor plus the others' Spearman; a
  (dataset, model) file CASTILLO lacks, or too few test prompts, is a row that says so.
- `T7_ceilings`: the leave-one-out and mean-of-10 ceilings per dataset × model on every union prompt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lengthpred.crossmodel.ceilings import POOLED
from lengthpred.crossmodel.table import ALL_MODELS, short_model
from lengthpred.eval.render import Cell, Column, Table
from lengthpred.metrics import UNDEFINED, is_undefined

_KIND = {"spearman": "corr", "kendall": "corr", "mae": "tokens", "mae_mean": "tokens"}
CEILING_NOTE = ("Ceiling: √(k·r/(1+(k−1)·r)) (Spearman–Brown, k = 10, r = mean pairwise Spearman between two "
                "samples), an estimate of the best Spearman any predictor of the expected length reaches against "
                "the mean of the 10 samples on these prompts, with its 95% bootstrap CI; a score above it is "
                "sampling noise. Share = Spearman / ceiling.")

WITHIN_NOTE = ("'(within dataset)': a baseline fitted on each dataset's own train prompts and scored on that "
               "dataset (pooled: its per-dataset predictions together); '(pooled fit)': fitted on all datasets "
               "together and scored pooled only, since prompt length is monotone in prompt tokens and its pooled "
               "slope would rank prompts inside one dataset with an arbitrary sign.")


class _Results:
    """Index of the tidy rows by (head, fit, model, dataset, metric)."""

    def __init__(self, df: pd.DataFrame) -> None:
        self.rows = {(r.head, r.fit, r.model, r.dataset, r.metric): r for r in df.itertuples(index=False)}

    def get(self, head: str, fit: str, model: str, dataset: str, metric: str) -> Any:
        return self.rows.get((head, fit, model, dataset, metric))

    def cell(self, head: str, fit: str, model: str, dataset: str, metric: str, ci: bool = True) -> Any:
        """A Cell, the row's note (too few test prompts, not fitted) or None."""
        r = self.get(head, fit, model, dataset, metric)
        if r is None:
            return None
        if r.note and not is_undefined(r.value) and _nan(r.value):
            return r.note
        v = UNDEFINED if is_undefined(r.value) else r.value
        return Cell(v, r.ci_low if ci else None, r.ci_high if ci else None, _KIND.get(metric, "float"))

    def n(self, head: str, fit: str, model: str, dataset: str) -> int | None:
        r = self.get(head, fit, model, dataset, "spearman")
        return None if r is None else int(r.n)


def _nan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _ceiling_cell(ceil: Mapping[tuple[str, str], Mapping[str, Any]], model: str, dataset: str) -> Cell | None:
    c = ceil.get((model, dataset))
    if c is None or _nan(c["ceiling_mean_k"]):
        return None
    lo, hi = c["ceiling_mean_k_lo"], c["ceiling_mean_k_hi"]
    return Cell(c["ceiling_mean_k"], None if _nan(lo) else lo, None if _nan(hi) else hi, "corr")


def _share(sp: Any, ceiling: Cell | None) -> str | None:
    if not isinstance(sp, Cell) or ceiling is None or is_undefined(sp.value) or _nan(sp.value):
        return None
    return f"{100 * float(sp.value) / float(ceiling.value):.0f}%"


def predictor_rows(fits: pd.DataFrame) -> list[tuple[str, str]]:
    """(head, fit kind) pairs in table order: each head's own-model fit, then its all-models fit."""
    out: list[tuple[str, str]] = []
    for head, g in fits.groupby("head", sort=False):
        kinds = ["own"] if (g["fit"] != ALL_MODELS).any() else []
        out += [(head, k) for k in kinds + (["all"] if (g["fit"] == ALL_MODELS).any() else [])]
    return out


def _fit_of(kind: str, model: str) -> str:
    return model if kind == "own" else ALL_MODELS


def _label(head: str, kind: str) -> str:
    return head if kind == "own" else f"{head} (all-models fit)"


def table_t7(results: pd.DataFrame, fits: pd.DataFrame, ceil: Mapping[tuple[str, str], Mapping[str, Any]],
             models: Sequence[str]) -> Table:
    ix = _Results(results)
    cols = [Column("Model"), Column("Predictor"), Column("Spearman", "up", "corr"),
            Column("Kendall τ", "up", "corr"), Column("MAE of the median (tokens)", "down", "tokens"),
            Column("MAE of the mean", "down", "tokens"),
            Column("Ceiling (mean of 10)", "up", "corr"), Column("Share of ceiling", "up"),
            Column("Over seeds (Spearman)"), Column("n test", None, "int")]
    status = {(r["head"], r["fit"]): r["status"] for r in fits.to_dict("records")}
    rows = []
    for m in models:
        c = _ceiling_cell(ceil, m, POOLED)
        for head, kind in predictor_rows(fits):
            fit = _fit_of(kind, m)
            if (head, fit) not in status:
                continue  # this head is fitted on other targets only (e.g. a proxy on all-models)
            sp = ix.cell(head, fit, m, POOLED, "spearman")
            if sp is None:
                sp = status[(head, fit)]
            rows.append([short_model(m), _label(head, kind), sp, ix.cell(head, fit, m, POOLED, "kendall"),
                         ix.cell(head, fit, m, POOLED, "mae"), ix.cell(head, fit, m, POOLED, "mae_mean"), c,
                         _share(sp, c), _seeds(ix, head, fit, m),
                         ix.n(head, fit, m, POOLED)])
    notes = ["Pooled over the seven datasets of the shared test split (each model's prompts that have its 10 "
             "samples); target: the mean of the 10 sampled lengths. Spearman, Kendall τ-b and MAE with 95% "
             "percentile bootstrap CIs over prompts.",
             "Predictors read SmolLM2-135M's prefill of the prompt (linear, probe, egtp: a cross-model proxy, "
             "not the serving model's own states), the prompt text (MiniLM proxies) or SmolLM2-135M itself adapted "
             "with LoRA on the fit's train prompts (lora); '(all-models fit)' is "
             "trained once on the mean over models and scored on every model.",
             "MAE scores each head's median prediction, as bench T1's does (MAE rewards the median); 'MAE of "
             "the mean' scores its conditional mean (Duan-smeared for log-target heads such as linear), blank for "
             "a head without one (a head without a median is scored on its one prediction).",
             WITHIN_NOTE, CEILING_NOTE]
    return Table("T7", "Cross-model length prediction on CASTILLO (test split, pooled)", cols, rows, notes)


def _seeds(ix: _Results, head: str, fit: str, model: str, dataset: str = POOLED) -> str | None:
    mean = ix.get(head, fit, model, dataset, "spearman_seed_mean")
    sd = ix.get(head, fit, model, dataset, "spearman_seed_sd")
    if mean is None or sd is None:
        return None
    if is_undefined(mean.value) or is_undefined(sd.value):
        return "undefined"
    return f"{float(mean.value):.3f} ± {float(sd.value):.3f} ({mean.note.split()[0]})"


def _own_or_all(fits: pd.DataFrame, head: str, model: str) -> str:
    """The fit a one-column-per-head table shows: the model's own when the head is fitted on every model
    (so a column never mixes own and all-models fits), else the all-models fit."""
    have = set(fits.loc[fits["head"] == head, "fit"])
    return model if set(fits["fit"]) - {ALL_MODELS} <= have else ALL_MODELS


def table_t7_summary(results: pd.DataFrame, fits: pd.DataFrame, ceil: Mapping[tuple[str, str], Mapping[str, Any]],
                     models: Sequence[str], primary: str) -> Table:
    ix = _Results(results)
    heads = list(dict.fromkeys(fits["head"]))
    cols = ([Column("Model"), Column("n test", None, "int"), Column("Ceiling (mean of 10)", "up", "corr")]
            + [Column(h, "up", "corr") for h in heads] + [Column(f"{primary}: share of ceiling", "up")])
    rows = []
    for m in models:
        c = _ceiling_cell(ceil, m, POOLED)
        cells = [ix.cell(h, _own_or_all(fits, h, m), m, POOLED, "spearman", ci=False) for h in heads]
        sp = ix.cell(primary, m, m, POOLED, "spearman")
        n = ceil.get((m, POOLED), {}).get("n")
        rows.append([short_model(m), n, c, *cells, _share(sp, c)])
    notes = ["Pooled test Spearman (CIs in T7). Heads fitted on every model show each model's own fit; heads "
             "fitted on fewer (the MiniLM proxies and lora, unless configured otherwise) show their all-models fit on "
             "every model (their own fits are in T7).",
             CEILING_NOTE]
    return Table("T7_summary", "Which models' lengths are predictable, against their ceilings", cols, rows, notes)


def table_t7_datasets(results: pd.DataFrame, fits: pd.DataFrame, ceil: Mapping[tuple[str, str], Mapping[str, Any]],
                      models: Sequence[str], datasets: Sequence[str], primary: str,
                      missing_files: Mapping[tuple[str, str], str]) -> Table:
    ix = _Results(results)
    scored_within = set(results.loc[results["dataset"] != POOLED, "head"])
    others = [h for h in dict.fromkeys(fits["head"]) if h != primary and h in scored_within]
    cols = ([Column("Model"), Column("Dataset"), Column("n test", None, "int"),
             Column("Ceiling (mean of 10)", "up", "corr"), Column("LOO ceiling", "up", "corr"),
             Column(f"{primary} Spearman", "up", "corr"), Column("Share", "up")]
            + [Column(h, "up", "corr") for h in others])
    rows = []
    for m in models:
        for ds in datasets:
            if (ds, m) in missing_files:
                rows.append([short_model(m), ds, 0, missing_files[(ds, m)], None, None, None] + [None] * len(others))
                continue
            c = _ceiling_cell(ceil, m, ds)
            loo = (ceil.get((m, ds)) or {}).get("ceiling_loo")
            sp = ix.cell(primary, m, m, ds, "spearman")
            rest = [ix.cell(h, _own_or_all(fits, h, m), m, ds, "spearman", ci=False) for h in others]
            n = (ceil.get((m, ds)) or {}).get("n")
            rows.append([short_model(m), ds, n, c, None if _nan(loo) else Cell(loo, kind="corr"), sp,
                         _share(sp, c), *rest])
    notes = ["Per dataset of the shared test split. The primary predictor with its 95% bootstrap CI; the others' "
             "point Spearman (CIs in results.csv). LOO ceiling: one sample vs the mean of the other nine "
             "(RESEARCH.md's figure), for a single-sample target.", WITHIN_NOTE, CEILING_NOTE]
    return Table("T7_datasets", "Cross-model length prediction per CASTILLO dataset (test split)", cols, rows, notes)


def table_ceilings(ceil_all: pd.DataFrame, models: Sequence[str], datasets: Sequence[str],
                   missing_files: Mapping[tuple[str, str], str], column: str = "ceiling_loo") -> Table:
    look = {(r["model"], r["dataset"]): r for r in ceil_all.to_dict("records")}
    cols = [Column("Dataset")] + [Column(short_model(m), "up", "corr") for m in models] + [Column("Range")]
    rows = []
    for ds in [*datasets, POOLED]:
        row: list[Any] = [ds]
        vals = []
        for m in models:
            r = look.get((m, ds))
            if (ds, m) in missing_files:
                row.append("no file")
            elif r is None or _nan(r[column]):
                row.append(None)
            else:
                row.append(Cell(r[column], kind="corr"))
                vals.append(float(r[column]))
        row.append(f"{min(vals):.2f}–{max(vals):.2f}" if vals else None)
        rows.append(row)
    what = ("leave-one-out: one sample vs the mean of the other nine" if column == "ceiling_loo"
            else "Spearman–Brown for the mean of 10 samples")
    notes = [f"Every prompt of the union (not only the capped sample), {what}. 'pooled': all datasets together, "
             "which adds the between-dataset spread."]
    return Table("T7_ceilings", "Sampling-noise ceiling per CASTILLO dataset and model", cols, rows, notes)
