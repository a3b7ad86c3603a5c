"""Two CASTILLO heads compared paired, on the same test prompts: for every fit target both heads were fitted on,
and every model that fit is scored on (every model for an all-models fit, the model itself for an own fit), the
difference of their seed means in Spearman and in MAE (each on the point it rewards) with a paired percentile
bootstrap interval over prompts and a one-sided bootstrap p (lengthpred.eval.seed_pairs.compare_seed_means, as
the bench compares lora with the probe).

The models share their test prompts, so the rows of one all-models fit are not independent: each row is its
own comparison, and no count over models is a test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from lengthpred.crossmodel.table import ALL_MODELS, LengthTable, short_model
from lengthpred.errors import ConfigError
from lengthpred.eval.render import Cell, Column, Table
from lengthpred.eval.seed_pairs import compare_seed_means

COLUMNS = ["head", "reference", "fit", "model", "metric", "scored", "n_seeds", "seed_mean", "seed_sd",
           "reference_n_seeds", "reference_mean", "reference_sd", "diff", "ci_low", "ci_high", "p_value", "n"]


def parse_pairs(pairs: Sequence[Sequence[str]] | None, heads: Sequence[str]) -> list[tuple[str, str]]:
    """`crossmodel.pairs` as (head, reference) tuples; a pair that is not two distinct configured heads is
    refused in one line."""
    out = []
    for p in pairs or []:
        if isinstance(p, str) or len(p) != 2 or p[0] == p[1]:
            raise ConfigError(f"crossmodel.pairs: {list(p) if not isinstance(p, str) else p!r} is not a pair of two "
                              "different heads, e.g. [lora, probe] (the head, then the reference)")
        missing = [h for h in p if h not in heads]
        if missing:
            raise ConfigError(f"crossmodel.pairs: {missing} not among the configured heads {list(heads)}")
        out.append((str(p[0]), str(p[1])))
    return out


def _frame(g: pd.DataFrame, ids: Sequence[str], y: Sequence[float]) -> pd.DataFrame:
    rows = g.dropna(axis=1, how="all")  # the columns of the other heads sharing `preds`
    return rows.set_index("id").loc[list(ids)].reset_index().assign(y_true=list(y), split="test")


def compare_pairs(preds: pd.DataFrame, table: LengthTable, test_ids: Sequence[str],
                  pairs: Sequence[tuple[str, str]], *, min_test: int = 10, n_boot: int = 1000,
                  seed: int = 0) -> pd.DataFrame:
    """One row per pair × shared fit target × scored model × metric (COLUMNS)."""
    by_fit = {k: g for k, g in preds.groupby(["head", "fit"], sort=False)}
    rows = []
    for head, ref in pairs:
        fits = [f for (h, f) in by_fit if h == head and (ref, f) in by_fit]
        for fit in fits:
            a, b = by_fit[(head, fit)], by_fit[(ref, fit)]
            shared = set(a["id"]) & set(b["id"])
            for model in table.models if fit == ALL_MODELS else [fit]:
                ids = [i for i in table.ids_with(model, test_ids) if i in shared]
                if len(ids) < min_test:
                    continue
                y = table.target(model, ids)
                df = compare_seed_means({head: [_frame(a, ids, y)], ref: [_frame(b, ids, y)]}, ref, ["test"],
                                        n_boot=n_boot, seed=seed)
                for metric, g in df.groupby("metric", sort=False):
                    r, q = g.set_index("head").loc[head], g.set_index("head").loc[ref]
                    rows.append({"head": head, "reference": ref, "fit": fit, "model": model, "metric": metric,
                                 "scored": r.scored, "n_seeds": int(r.n_seeds), "seed_mean": r.seed_mean,
                                 "seed_sd": r.seed_sd, "reference_n_seeds": int(q.n_seeds),
                                 "reference_mean": q.seed_mean, "reference_sd": q.seed_sd, "diff": r.diff_vs_reference, "ci_low": r.ci_low,
                                 "ci_high": r.ci_high, "p_value": r.p_value, "n": int(r.n)})
    return pd.DataFrame(rows, columns=COLUMNS)


def _mean_sd(mean: float, sd: float, kind: str) -> str:
    text = Table.number(mean, kind)
    return f"{text} ± {Table.number(sd, kind)}" if math.isfinite(sd) else text


def table_t7_pairs(df: pd.DataFrame) -> Table:
    """T7_pairs: each row of `compare_pairs`, the difference with its interval."""
    cols = [Column("Head"), Column("Reference"), Column("Fit"), Column("Model"), Column("Metric (prediction scored)"),
            Column("Head's seeds"), Column("Head (seed mean ± sd)"), Column("Reference's seeds"),
            Column("Reference (seed mean ± sd)"), Column("Head − reference [95% CI]", None, "float"),
            Column("p (one-sided, bootstrap)", None, "float"), Column("n test", None, "int")]
    rows = []
    for r in df.itertuples():
        kind = "corr" if r.metric == "spearman" else "tokens"
        fit = "all-models fit" if r.fit == ALL_MODELS else "own fit"
        rows.append([r.head, r.reference, fit, short_model(r.model), f"{r.metric} ({r.scored})", str(r.n_seeds),
                     _mean_sd(r.seed_mean, r.seed_sd, kind), str(r.reference_n_seeds),
                     _mean_sd(r.reference_mean, r.reference_sd, kind),
                     Cell(r.diff, r.ci_low, r.ci_high, kind), Cell(r.p_value, kind="corr"), r.n])
    notes = ["The same test prompts for both heads (each model's prompts that have its 10 samples); target: the mean "
             "of the 10 sampled lengths. Each head's seeds are averaged; the interval is a paired percentile "
             "bootstrap over prompts, every seed of both heads scored on each resample; p: the share of resamples "
             "where the head is not better (higher Spearman, lower MAE).",
             "MAE scores each seed's median where the fit recorded one, else its one prediction (the column says "
             "which). The models share their prompts: the rows of one all-models fit are not independent, and no "
             "count over them is a test."]
    return Table("T7_pairs", "Two heads compared paired on CASTILLO's test prompts", cols, rows, notes)
