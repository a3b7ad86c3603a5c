"""The paper tables T1–T6, built from results files (and the online/scheduling/cost outputs) only.

Split names follow docs/DESIGN.md: `indomain/<domain>/<part>`, `cross/<source>-><target>/<part>`,
`forelen/<subset>` (`lengthpred.names.SplitName`). Every table takes a tidy results frame that already
passed `check_consistent`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lengthpred.eval.render import Cell, Column, Table
from lengthpred.eval.results import CEILING_HEAD, SPLIT_HEAD
from lengthpred.metrics import METRICS, is_undefined
from lengthpred.names import POOLED_DOMAIN, SELECTED_RLS, SplitName, forgetting_of, is_rls, pair_name
from lengthpred.seeds import seed_metric_name

# heads written by the online stage (scripts/adapt.py): kept out of T1/T2/T4, compared in T3
ONLINE_HEADS = r"^(static|rls(@.*)?|nlms.*|sgd.*|window.*|oracle_refit.*|refit.*|indomain.*)$"
_KIND = {
    "spearman": "corr",
    "kendall": "corr",
    "pearson": "corr",
    "mae": "tokens",
    "mae_mean": "tokens",
    "rmse": "tokens",
    "median_ae": "tokens",
    "bucket_accuracy": "frac",
    "within_50": "frac",
    "within_100": "frac",
}
_LABEL = {
    "spearman": "Spearman",
    "kendall": "Kendall τ",
    "pearson": "Pearson",
    "mae": "MAE",
    "mae_mean": "MAE of the mean",
    "rmse": "RMSE",
    "median_ae": "Median AE",
    "bucket_accuracy": "Bucket acc.",
    "within_50": "Within ±50",
    "within_100": "Within ±100",
}


MAE_NOTE = (
    "MAE of median: MAE of each head's median prediction, the point MAE rewards (a log-target head's "
    "expm1 of its log prediction, a binned head's predicted-distribution median); MAE of mean: of its mean "
    "prediction (Duan-smeared for log-target heads, the bins' expectation for binned ones), '—' where a head "
    "has none (proxy_rank) or its predictions file predates the point columns (then MAE scores the head's "
    "configured prediction). Spearman reads the configured prediction."
)


def _direction(metric: str) -> str | None:
    return ("up" if METRICS.get(metric).higher_is_better else "down") if metric in METRICS else None


class _Index:
    """Fast lookup of (head, split, metric) → row of a results frame."""

    def __init__(self, df: pd.DataFrame) -> None:
        self.df = df
        self.rows = {(r.head, r.split, r.metric): r for r in df.itertuples(index=False)}

    def cell(self, head: str, split: str, metric: str, kind: str | None = None) -> Cell | None:
        r = self.rows.get((head, split, metric))
        if r is None:
            return None
        return Cell(r.value, r.ci_low, r.ci_high, kind or _KIND.get(metric, "float"))

    def value(self, head: str, split: str, metric: str) -> Any:
        r = self.rows.get((head, split, metric))
        return None if r is None else r.value

    def heads(self, splits: Sequence[str] | None = None, exclude_online: bool = False) -> list[str]:
        d = self.df[~self.df["head"].isin([CEILING_HEAD, SPLIT_HEAD])]
        if splits is not None:
            d = d[d["split"].isin(splits)]
        hs = sorted(d["head"].unique())
        return [h for h in hs if not (exclude_online and re.match(ONLINE_HEADS, h))]

    def splits(self, kind: str, part: str | None = None) -> list[str]:
        out = []
        for s in sorted(self.df["split"].unique()):
            p = SplitName.try_parse(s)  # names that are no split of ours (e.g. a bare `test`) are skipped
            if p is not None and p.kind == kind and (part is None or p.part in ("", part)):
                out.append(s)
        return out


def _params(ix: _Index, head: str, splits: Sequence[str]) -> Cell | None:
    for s in splits:
        v = ix.value(head, s, "n_parameters")
        if v is not None:
            return Cell(v, kind="int")
    return None


def _ceiling(ix: _Index, split: str) -> Cell | None:
    """The ceiling for the target the split used: mean-of-k when prompts had several samples."""
    k = next((ix.value(h, split, "n_samples") for h in ix.heads([split])), None)
    order = ("ceiling_mean_k", "ceiling_loo") if k is not None and not is_undefined(k) and k > 1 else ()
    for m in (*order, "ceiling_single", "ceiling_loo"):
        c = ix.cell(CEILING_HEAD, split, m, "corr")
        if c is not None:
            return c
    return None


def _seed_spread(ix: _Index, head: str, split: str, metric: str = "spearman") -> str | None:
    """`mean ± sd (k)` of a metric over a multi-seed head's seeds (lengthpred.seeds), else None."""
    k = ix.value(head, split, "n_seeds")
    mean = ix.value(head, split, seed_metric_name(metric, "mean"))
    sd = ix.value(head, split, seed_metric_name(metric, "sd"))
    if k is None or mean is None or sd is None:
        return None
    if is_undefined(mean) or is_undefined(sd):
        return "undefined"
    kind = _KIND.get(metric, "float")
    return f"{Table.number(mean, kind)} ± {Table.number(sd, kind)} ({int(k)})"


def table_t1(df: pd.DataFrame, part: str = "test") -> Table:
    """T1 in-domain: one row per domain × head."""
    ix = _Index(df)
    cols = [
        Column("Domain"),
        Column("Head"),
        Column("Spearman", "up", "corr"),
        Column("Spearman over seeds", "up", "text"),
        Column("Noise ceiling (estimate)", "up", "corr"),
        Column("MAE of median (tokens)", "down", "tokens"),
        Column("MAE of mean (tokens)", "down", "tokens"),
        Column("Params", None, "int"),
        Column("n", None, "int"),
    ]
    rows = []
    splits = sorted(ix.splits("indomain", part), key=lambda s: (SplitName.parse(s).name == POOLED_DOMAIN, s))
    for s in splits:
        dom = SplitName.parse(s).name
        for h in ix.heads([s], exclude_online=True):
            sp = ix.cell(h, s, "spearman")
            n = ix.rows[(h, s, "spearman")].n if sp is not None else None
            rows.append(
                [
                    dom,
                    h,
                    sp,
                    _seed_spread(ix, h, s),
                    _ceiling(ix, s),
                    ix.cell(h, s, "mae"),
                    ix.cell(h, s, "mae_mean"),
                    _params(ix, h, splits),
                    n,
                ]
            )
    notes = [
        "Spearman and MAE with 95% percentile bootstrap CIs over prompts; 'all': every domain's prompts pooled.",
        MAE_NOTE,
        "Heads fitted over several seeds (MLP heads): Spearman and MAE are the first seed's; 'Spearman over "
        "seeds' is the mean ± sd over the seeds (their number in brackets), each seed selected on val.",
        "Noise ceiling (estimate): an estimate, from the sampled lengths, of the best Spearman any predictor of "
        "the expected length could reach against this target (√(k·r/(1+(k−1)·r)) from the mean pairwise "
        "Spearman r), with its 95% bootstrap CI over prompts; a head whose CI overlaps it is not shown to be "
        "below it, and one above it is sampling noise ('—' where prompts had a single sample).",
    ]
    return Table("T1", f"In-domain length prediction ({part} split)", cols, rows, notes)


def table_t2(df: pd.DataFrame, metric: str = "spearman", part: str = "test") -> Table:
    """T2 cross-domain: rows head × source, columns targets; the in-domain score on the diagonal.

    Offline heads are fitted per pair by scripts/train.py (root `cross_domain`) on the pair's source train
    split and selected on its val split; `static` is the online stage's linear readout fitted on the source."""
    ix = _Index(df)
    cross = ix.splits("cross", part)
    targets = sorted({SplitName.parse(s).target for s in cross})
    sources = sorted({SplitName.parse(s).source for s in cross}, key=lambda x: (x == "mix", x))
    cols = [Column("Head"), Column("Train on ↓ / test on →")] + [
        Column(t, _direction(metric), "corr") for t in targets
    ]
    rows = []
    # the online stage's `static` head is the linear readout fitted offline on each pair's source:
    # the one cross-domain prediction every run has, so it leads the matrix
    offline = ix.heads(cross, exclude_online=True)
    heads = (["static"] if "static" in ix.heads(cross) else []) + offline
    for h in heads:
        for src in sources:
            row: list[Any] = [h, src]
            for t in targets:
                name = SplitName.indomain(t, part) if src == t else SplitName.cross(pair_name(src, t), part)
                split = str(name)
                row.append(ix.cell(h, split, metric, _KIND.get(metric)))
            rows.append(row)
    notes = [
        f"{_LABEL.get(metric, metric)} on the target's {part} split; the diagonal is the in-domain score "
        "(the head fitted on every domain's train split pooled).",
        "Off the diagonal the offline heads are fitted on the pair's source train split and selected on its val split; "
        "'mix' trains on every other domain; 'static' is the linear readout fitted on the source (online stage).",
    ]
    return Table("T2", f"Cross-domain {_LABEL.get(metric, metric)}", cols, rows, notes)


def _online_order(head: str) -> tuple[int, float, str]:
    """RLS heads first (λ descending), then the other online baselines, then the upper bounds."""
    if head.startswith("rls"):
        return 0, (-forgetting_of(head) if is_rls(head) else 0.0), head
    return (2 if head.startswith(("oracle", "indomain")) else 1), 0.0, head


def table_t3(
    df: pd.DataFrame,
    metric: str = "spearman",
    baseline: str = "static",
    part: str = "test",
    online_targets: pd.DataFrame | None = None,
) -> Table:
    """T3 online adaptation. With the online stage's `per_target.csv` (`online_targets`): one row per target
    domain and overall, Spearman differences with prompt-bootstrap CIs (`table_t3_targets`). Without it:
    one row per cross pair from the results file, each online head and the difference of the RLS head with
    λ chosen on validation (`rls@val`; a lone `rls@λ` head needs no choice) from the baseline."""
    if online_targets is not None and len(online_targets):
        return table_t3_targets(online_targets)
    ix = _Index(df)
    cross = [s for s in ix.splits("cross", part) if (baseline, s, metric) in ix.rows]
    online = sorted(
        (h for h in ix.heads(cross) if re.match(ONLINE_HEADS, h) and h != baseline), key=_online_order
    )
    rls = [h for h in online if is_rls(h)]
    chosen = SELECTED_RLS if SELECTED_RLS in online else (rls[0] if len(rls) == 1 else None)
    kind = _KIND.get(metric, "float")
    cols = (
        [Column("Pair"), Column("Shift", None, "float"), Column(baseline, _direction(metric), kind)]
        + [Column(h, _direction(metric), kind) for h in online]
        + ([Column(f"{chosen} − {baseline}", _direction(metric), kind)] if chosen else [])
    )
    rows = []

    def shift_of(s: str) -> float:
        v = ix.value(SPLIT_HEAD, s, "shift")
        return float(v) if v is not None and not is_undefined(v) else float("inf")

    for s in sorted(cross, key=lambda s: (shift_of(s), s)):
        base = ix.value(baseline, s, metric)
        row: list[Any] = [
            SplitName.parse(s).name,
            Cell(ix.value(SPLIT_HEAD, s, "shift"), kind="float"),
            ix.cell(baseline, s, metric),
        ]
        row += [ix.cell(h, s, metric) for h in online]
        if chosen:
            v = ix.value(chosen, s, metric)
            paired = ix.cell(chosen, s, f"{metric}_diff_vs_{baseline}", kind)
            ok = v is not None and base is not None and not is_undefined(v) and not is_undefined(base)
            row.append(paired if paired is not None else (Cell(float(v) - float(base), kind=kind) if ok else None))
        rows.append(row)
    notes = [
        f"{_LABEL.get(metric, metric)} on the target's held-out {part} split after the stream; rows sorted by "
        "the pair's shift from splits.json (eval.shift_key). Difference: the RLS head whose λ was chosen on "
        f"the stream's validation requests ({SELECTED_RLS}) minus {baseline}, absolute, with a paired-bootstrap "
        "95% CI where evaluate.py computed one. Pairs that share a target share its test prompts: they are "
        "not independent (the online stage's per-target summary is the unit to read)."
    ]
    return Table("T3", "Online adaptation gain vs shift size", cols, rows, notes)


def table_t3_targets(per_target: pd.DataFrame) -> Table:
    """T3 from the online stage's per_target.csv (lengthpred.online.summary): one row per target, then all."""

    def num(r: Any, col: str, kind: str) -> Cell | None:
        v = r.get(col)
        return None if v is None or pd.isna(v) else Cell(float(v), kind=kind)

    def delta(r: Any, prefix: str) -> Cell | None:
        v = r.get(prefix)
        if v is None or pd.isna(v):
            return None
        lo, hi = r.get(f"{prefix}_lo"), r.get(f"{prefix}_hi")
        ci = lo is not None and hi is not None and not (pd.isna(lo) or pd.isna(hi))
        return Cell(float(v), float(lo) if ci else None, float(hi) if ci else None, kind="corr")

    has_oracle = "mean_oracle_test_delta" in per_target.columns
    cols = [
        Column("Target"),
        Column("Pairs", None, "int"),
        Column("Shift (served, mean)", None, "float"),
        Column("Shift range", None, "text"),
        Column("Labels seen, mean (median)", None, "text"),
        Column("Share >= 10 labels", None, "frac"),
        Column("In flight (mean)", None, "tokens"),
        Column("static", "up", "corr"),
        Column("RLS, λ on val", "up", "corr"),
        Column("RLS − static, test", "up", "corr"),
        Column("RLS − static, in-stream", "up", "corr"),
    ]
    has_sd = "rls_test_delta_seed_sd" in per_target.columns
    if has_sd:
        cols.append(Column("sd over seeds (test)", None, "corr"))
    if has_oracle:
        cols.append(Column("Mean-label oracle − static, test", "up", "corr"))
    cols += [Column("λ chosen (pair-seeds)" if has_sd else "λ chosen (pairs)"), Column("n test", None, "int")]
    rows = []
    for r in per_target.to_dict("records"):
        row: list[Any] = [
            str(r["target"]),
            num(r, "n_pairs", "int"),
            num(r, "shift_mean", "float"),
            f"{float(r['shift_min']):.2f} to {float(r['shift_max']):.2f}",
            f"{float(r['labels_seen_mean']):.1f} ({float(r['labels_seen_median']):g})",
            num(r, "labels_seen_ge10", "frac"),
            num(r, "in_flight_mean", "tokens"),
            num(r, "base_test_spearman", "corr"),
            num(r, "rls_test_spearman", "corr"),
            delta(r, "rls_test_delta"),
            delta(r, "rls_stream_delta"),
        ]
        if has_sd:
            row.append(num(r, "rls_test_delta_seed_sd", "corr"))
        if has_oracle:
            row.append(delta(r, "mean_oracle_test_delta"))
        row += [str(r.get("forgetting", "")), num(r, "n_test", "int")]
        rows.append(row)
    load = pd.to_numeric(per_target.get("load"), errors="coerce")
    load_text = f"{float(load.mean()):.2f}" if load is not None and load.notna().any() else "unknown"
    seeds = pd.to_numeric(per_target.get("n_seeds"), errors="coerce")
    n_seeds = int(seeds.max()) if seeds is not None and seeds.notna().any() else 1
    notes = [
        "Per target domain (its pairs share its test prompts and its stream, so the target is the independent "
        f"unit): Spearman on the held-out target test set after the stream, averaged over the target's pairs "
        f"and over {n_seeds} stream seed(s) (each seed: one arrival order and one draw of revealed samples); "
        "differences are absolute, with 95% percentile-bootstrap CIs in which each replicate resamples the "
        "target's prompts (the same resample for all its pairs and seeds) and, independently, its stream seeds "
        "with replacement, averaging over the resampled seeds, so the interval covers both prompt and stream "
        "randomness ('all' averages the targets, resampling each target's prompts and seeds). sd over seeds: "
        "standard deviation across seeds of the seed's test difference (for 'all', of the target average).",
        f"Stream: the target's train+val prompts arrive at load {load_text} of the serving model's capacity "
        "(simulated server); each completion reveals one sampled length. Labels seen: lengths revealed "
        "before a request was predicted; in flight: requests arrived but not yet completed at that moment.",
        "λ is chosen per pair on the stream's validation requests (the target's val part, scored at arrival), "
        "never on the test set; the in-stream difference is scored on the other stream requests against the "
        "revealed length. Shift: Wasserstein-1 distance of log served lengths, source train vs target "
        "stream. Mean-label oracle: RLS updated with the mean of each prompt's samples instead.",
    ]
    return Table("T3", "Online adaptation by target domain", cols, rows, notes)


def table_t4(df: pd.DataFrame, metric: str = "mae") -> Table:
    """T4 ForeLen-style subsets: rows heads, columns subsets (LongSeq, Reasoning, RL)."""
    ix = _Index(df)
    splits = ix.splits("forelen")
    cols = [Column("Head")] + [
        Column(SplitName.parse(s).name, _direction(metric), _KIND.get(metric, "float")) for s in splits
    ]
    rows = [[h] + [ix.cell(h, s, metric) for s in splits] for h in ix.heads(splits, exclude_online=True)]
    return Table(
        "T4",
        f"ForeLen-style subsets: {_LABEL.get(metric, metric)}",
        cols,
        rows,
        [f"{_LABEL.get(metric, metric)} with 95% bootstrap CIs."]
        + ([MAE_NOTE] if metric in ("mae", "mae_mean") else []),
    )


# --- T5 scheduling: lengthpred/sched/sweep/experiment.py's sched_results.csv (+ sched_gains.csv) ----------------
T5_METRICS = (
    "per_token_latency_mean",
    "per_token_latency_p99",
    "jct_mean",
    "ttft_mean",
    "throughput",
    "preemptions",
    "preempt_overhead",
    "max_wait",
)
_SCHED_UP = ("throughput", "n_finished")


def _sched_index(df: pd.DataFrame, hw: bool) -> dict[tuple, Any]:
    return {
        ((str(r.hardware),) if hw else ())
        + (float(r.load), str(r.policy), str(r.predictor), str(r.metric)): r
        for r in df.itertuples(index=False)
    }


def _sched_cell(r: Any, kind: str = "sig", scale: float = 1.0) -> Cell | None:
    if r is None:
        return None
    lo, hi = (getattr(r, "ci_low", None), getattr(r, "ci_high", None))
    return Cell(_scaled(r.value, scale), _scaled(lo, scale), _scaled(hi, scale), kind)


def _scaled(v: Any, scale: float) -> Any:
    return v if v is None or is_undefined(v) else float(v) * scale


def table_t5(
    sched: pd.DataFrame,
    gains: pd.DataFrame | None = None,
    metrics: Sequence[str] = T5_METRICS,
    key_metric: str = "per_token_latency_mean",
) -> Table:
    """T5 scheduling: one row per (hardware ×) load × policy × predictor; the gain over FCFS and the share of
    the oracle's gain come from sched_gains.csv (paired over seeds, with CIs) or, without it, from the means."""
    hw = "hardware" in sched.columns and sched["hardware"].nunique() > 1
    present = [m for m in metrics if m in set(sched["metric"])]
    cols = ([Column("Hardware")] if hw else []) + [
        Column("Load", None, "float"),
        Column("Policy"),
        Column("Predictor"),
    ]
    cols += [Column(m, "up" if m in _SCHED_UP else "down", "sig") for m in present]
    cols += [Column(f"Gain vs FCFS ({key_metric})", "up", "pct"), Column("Share of oracle gain", "up", "pct")]
    idx = _sched_index(sched, hw)
    gidx = _sched_index(gains, hw and "hardware" in gains.columns) if gains is not None else None
    rows = []
    for key in sorted({k[:-1] for k in idx}):
        row: list[Any] = list(key[:-3]) + [Cell(key[-3], kind="float"), key[-2], key[-1]]
        row += [_sched_cell(idx.get((*key, m))) for m in present]
        if gidx is not None:
            row += [
                _sched_cell(gidx.get((*key, "gain_vs_fcfs")), "pct", 100.0),
                _sched_cell(gidx.get((*key, "share_of_oracle")), "pct", 100.0),
            ]
        else:
            row += _naive_gains(idx, key, key_metric)
        rows.append(row)
    n = pd.to_numeric(sched["n"], errors="coerce").max() if "n" in sched.columns else float("nan")
    seeds = f"{int(n)} seeds" if pd.notna(n) else "seeds"
    return Table(
        "T5",
        "Scheduling with predicted lengths",
        cols,
        rows,
        [
            f"Mean over {seeds} with 95% percentile-bootstrap intervals (resampling seeds). Each request has "
            "one sampled length; predictor `clairvoyant` (the oracle policies) knows it, `mean-oracle` knows only "
            "the leave-one-out mean of the prompt's other samples, `random` is a random length per prompt (the "
            f"anchor: read shares against its row, not 0). Gain: relative reduction of {key_metric} vs FCFS at "
            "the same load; share: that reduction over the clairvoyant oracle's, undefined where the oracle's "
            "own gain interval reaches 0 or its gain is below 2 points. Loads >= 1 are overloaded: runs stop at "
            "the horizon."
        ],
    )


def _naive_gains(idx: dict[tuple, Any], key: tuple, metric: str) -> list[Cell | None]:
    ctx, load = key[:-3], key[-3]
    at = {
        (k[-3], k[-2]): r.value for k, r in idx.items() if k[:-4] == ctx and k[-4] == load and k[-1] == metric
    }
    fcfs = [v for (p, _), v in at.items() if p.lower() == "fcfs"]
    oracle = [v for (p, d), v in at.items() if d == "clairvoyant" or p.lower().startswith("oracle")]
    mine = idx.get((*key, metric))
    if not fcfs or mine is None or not fcfs[0]:
        return [None, None]
    gain = Cell(100.0 * (fcfs[0] - mine.value) / fcfs[0], kind="pct")
    share = (
        Cell(100.0 * (fcfs[0] - mine.value) / (fcfs[0] - min(oracle)), kind="pct")
        if oracle and fcfs[0] != min(oracle)
        else None
    )
    return [gain, share]


# --- T6 costs: costs file rows `head, n_parameters, extraction_overhead_pct, predict_latency_ms, ...` -
COST_COLUMNS = {
    "n_parameters": ("Params", None, "int"),
    "extraction_overhead_pct": ("Extraction overhead (% of prefill)", "down", "float"),
    "predict_latency_ms": ("Predict latency (ms)", "down", "ms"),
    "update_latency_ms": ("Update latency (ms)", "down", "ms"),
}


def assemble_costs(
    results: pd.DataFrame, costs: pd.DataFrame | None = None, online_summary: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per head: parameter counts from results, update latency (mean over pairs) from the online
    stage's summary.csv (`head`, `update_ms`), then a costs file's columns (it wins where both exist)."""
    rows: dict[str, dict[str, Any]] = {}
    npar = results[(results["metric"] == "n_parameters") & results["value"].map(lambda v: v is not None)]
    for r in npar.sort_values(["head", "split"]).itertuples(index=False):
        rows.setdefault(r.head, {"head": r.head, "n_parameters": float(r.value)})
    if online_summary is not None and {"head", "update_ms"} <= set(online_summary.columns):
        for h, g in online_summary.groupby("head", sort=True):
            ms = pd.to_numeric(g["update_ms"], errors="coerce").dropna()
            if len(ms):
                rows.setdefault(str(h), {"head": str(h)})["update_latency_ms"] = float(ms.mean())
    if costs is not None:
        for r in costs.to_dict("records"):
            rows.setdefault(str(r["head"]), {"head": str(r["head"])}).update(
                {k: v for k, v in r.items() if k != "head" and not (v is None or pd.isna(v))}
            )
    if not rows:
        return pd.DataFrame(columns=["head"])
    return pd.DataFrame([rows[h] for h in sorted(rows)])


def table_t6(costs: pd.DataFrame) -> Table:
    """T6 costs: one row per head; known columns first, any other numeric column after."""
    known = [c for c in COST_COLUMNS if c in costs.columns]
    extra = sorted(
        c
        for c in costs.columns
        if c not in COST_COLUMNS and c != "head" and pd.api.types.is_numeric_dtype(costs[c])
    )
    cols = (
        [Column("Head")]
        + [Column(*COST_COLUMNS[c]) for c in known]
        + [Column(c, None, "float") for c in extra]
    )
    rows = []
    for r in costs.sort_values("head", kind="stable").to_dict("records"):
        row: list[Any] = [str(r["head"])]
        for c in known + extra:
            v = r.get(c)
            row.append(
                None
                if v is None or pd.isna(v)
                else Cell(float(v), kind=COST_COLUMNS.get(c, ("", None, "float"))[2])
            )
        rows.append(row)
    return Table(
        "T6",
        "Costs: extraction overhead, predictor latency and size",
        cols,
        rows,
        ["Extraction overhead: extra prefill time to capture the features, relative to a plain prefill."],
    )


def build_tables(
    results: pd.DataFrame,
    *,
    sched: pd.DataFrame | None = None,
    sched_gains: pd.DataFrame | None = None,
    costs: pd.DataFrame | None = None,
    online_summary: pd.DataFrame | None = None,
    options: Mapping[str, Any] | None = None,
    online_targets: pd.DataFrame | None = None,
) -> dict[str, Table]:
    """Every table its inputs allow, keyed T1…T6; a table with no rows is left out."""
    o = dict(options or {})
    part = o.get("part", "test")
    tables = {
        "T1": table_t1(results, part),
        "T2": table_t2(results, o.get("t2_metric", "spearman"), part),
        "T3": table_t3(
            results,
            o.get("t3_metric", "spearman"),
            o.get("online_baseline", "static"),
            part,
            online_targets=online_targets,
        ),
        "T4": table_t4(results, o.get("t4_metric", "mae")),
    }
    if sched is not None and len(sched):
        tables["T5"] = table_t5(
            sched, sched_gains, o.get("t5_metrics", T5_METRICS), o.get("t5_metric", "per_token_latency_mean")
        )
    cost_rows = assemble_costs(results, costs, online_summary)
    if len(cost_rows):
        tables["T6"] = table_t6(cost_rows)
    return {k: t for k, t in tables.items() if t.rows}
