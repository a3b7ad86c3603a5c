"""The gap stage (`scripts/gap.py`): where the gap between the best heads and the noise ceiling sits.

A learning curve per head of `gap.heads` (lengthpred.eval.learning_curve: `gap.fractions` of the train prompts,
`gap.resamples` draws each, every fit under the head's own search and budget, selected on validation), its fitted
trend and the train size it says would reach `gap.share` of the test noise ceiling; then the test error of the
heads' full-train fits (and of any `gap.extra_predictions`, e.g. the lora head's train run) broken down by
domain, prompt length, capped share and answer length, and the prompts every head gets wrong set against their
own sample spread (lengthpred.eval.error_breakdown).

Writes into `out_dir`: `gap_reach.csv` (every head at its full train set against `gap.share` of the ceiling),
`gap_points.csv`, `gap_trend.csv`, `gap_breakdown.csv`, `gap_noise.csv`,
`gap_wrong_domains.csv`, `learning_curve.png` and `gap.md` (the tables; `python -m docsgen.convert --ingest
<out>/gap.md --as bench_gap` makes them committed rows).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf, open_dict

from lengthpred.data import load_splits
from lengthpred.errors import ConfigError, DataError
from lengthpred.eval.error_breakdown import (
    DIMENSIONS,
    all_wrong,
    breakdown,
    domain_mix,
    noise_sentence,
    noise_table,
)
from lengthpred.eval.learning_curve import (
    MIN_TRAIN,
    CurvePoint,
    Trend,
    ceiling_rows,
    check_fractions,
    draw_means,
    learning_curve,
    points_frame,
    trend,
)
from lengthpred.eval.plots import learning_curve_figure
from lengthpred.heads import HEADS, HeadSettings, run_training
from lengthpred.heads.assemble import indomain_ids
from lengthpred.heads.base import LabeledSet
from lengthpred.metrics import spearman_rows
from lengthpred.names import SplitName
from lengthpred.seeds import seed_columns
from lengthpred.stages.heads import head_config, plain
from lengthpred.stages.train import load_stage_inputs


def _sets(cfg: DictConfig, name: str) -> tuple[HeadSettings, dict[str, LabeledSet]]:
    """The head's settings (conf/head/<name>.yaml with `gap.head_overrides.<name>`) and its train/val/test sets,
    features loaded as train.py does."""
    over = (OmegaConf.to_container(cfg.gap.head_overrides, resolve=True) or {}).get(name) or {}
    hcfg = OmegaConf.to_container(OmegaConf.merge(head_config(cfg, name), over), resolve=True)
    sub = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(sub):
        sub.head = hcfg
    data = load_stage_inputs(sub)
    ids = indomain_ids(data.splits)
    sets = {part: data.labeled(ids[part], part) for part in ("train", "val", "test")}
    settings = HeadSettings.from_mapping(plain(hcfg) | {"feature": data.feature}, group=f"head {name}")
    return settings, sets


def _fitter(name: str, settings: HeadSettings, val: LabeledSet, test: LabeledSet):
    seeded = "random_state" in HEADS.get(name)().get_params()

    def fit(train: LabeledSet, random_state: int) -> tuple[dict[str, Any], np.ndarray]:
        s = settings.replace(params=settings.params | {"random_state": random_state}) if seeded else settings
        _, metrics, frame = run_training(name, s, train, val, test, n_seeds=1)
        return metrics, frame["y_pred"].to_numpy(float)

    return fit


def extra_predictions(path: str | Path, ids: list[str]) -> list[np.ndarray]:
    """A train run's in-domain test predictions (`predictions.parquet`), one array per seed (its seed columns, or
    `y_pred` for a one-seed head), first seed first, in the order of `ids`."""
    p = pd.read_parquet(path)
    p = p[[SplitName.parse(s).part == "test" and str(s).startswith("indomain/") for s in p["split"]]]
    p = p.drop_duplicates("id")
    p = p.set_index(p["id"].astype(str).to_numpy())
    missing = [i for i in ids if i not in p.index]
    if missing:
        raise DataError(f"{path}: {len(missing)} test prompts have no prediction (e.g. {missing[:3]})")
    cols = seed_columns(p.columns) or ["y_pred"]
    return [p.loc[ids, c].to_numpy(float) for c in cols]


def reach_table(seeds: dict[str, list[np.ndarray]], y: np.ndarray, samples: np.ndarray, *, share: float,
                n_boot: int, seed: int) -> pd.DataFrame:
    """Per head (its predictions per seed): the test Spearman averaged over its seeds and that mean's share of the
    test ceiling, with 95% bootstrap intervals over test prompts and seeds (the same prompt replicates for every head
    and the ceiling; each replicate also redraws the seeds, `draw_means`), the sd over seeds, and whether the
    share's interval lies above `share` (reached), below it (not reached) or spans it. A one-seed head's interval
    covers the test prompts only."""
    rng = np.random.default_rng(seed)
    idx = np.vstack([np.arange(len(y))[None, :], rng.integers(0, len(y), size=(n_boot, len(y)))])
    ceil = ceiling_rows(samples)(idx)
    rows = []
    for h, preds in seeds.items():
        per_seed = np.stack([spearman_rows(y[idx], p[idx]) for p in preds])  # [seeds, B + 1]
        rho = draw_means(per_seed, rng)
        ratio = rho / ceil
        lo, hi = np.nanquantile(rho[1:], [0.025, 0.975])
        rlo, rhi = np.nanquantile(ratio[1:], [0.025, 0.975])
        verdict = "reached" if rlo >= share else "not reached" if rhi < share else "not shown either way"
        rows.append({"head": h, "seeds": len(preds), "spearman": rho[0], "spearman_low": lo, "spearman_high": hi,
                     "seed_sd": float(np.std(per_seed[:, 0], ddof=1)) if len(preds) > 1 else math.nan,
                     "share": ratio[0], "share_low": rlo, "share_high": rhi, "verdict": verdict})
    return pd.DataFrame(rows)


def run_gap(cfg: DictConfig, out_dir: str | Path, log: Any = print) -> dict[str, Any]:
    g = cfg.gap
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    heads = [str(h) for h in g.heads]
    if not heads:
        raise ConfigError("gap.heads is empty: name the heads whose learning curves to fit, e.g. [linear, probe]")
    extra = {str(k): str(v) for k, v in (OmegaConf.to_container(g.extra_predictions) or {}).items()}
    clash = sorted(set(extra) & set(heads))
    if clash:
        raise ConfigError(f"gap.extra_predictions: {', '.join(clash)} is also in gap.heads; label the train run's "
                          "predictions another way (e.g. +gap.extra_predictions.<head>_run=...)")
    gone = [v for v in extra.values() if not Path(v).is_file()]
    if gone:
        raise DataError(f"gap.extra_predictions: no predictions file at {', '.join(gone)}")
    min_train = int(g.get("min_train", MIN_TRAIN))
    check_fractions(list(g.fractions), len(indomain_ids(load_splits(cfg.data))["train"]), min_train)  # before any load
    loaded = {h: _sets(cfg, h) for h in heads}
    first = loaded[heads[0]][1]
    check_fractions(list(g.fractions), len(first["train"]), min_train)  # the prompts with targets, before any fit
    test = first["test"]
    if test.sample_lengths is None:
        raise DataError("gap: the targets carry no per-sample lengths: the noise ceiling needs them")
    k = min(len(s) for s in test.sample_lengths)
    samples = np.stack([np.asarray(s[:k], dtype=np.float64) for s in test.sample_lengths])  # [n_test, k]
    points: list[CurvePoint] = []
    trends: dict[str, Trend] = {}
    for h in heads:
        settings, sets = loaded[h]
        pts = learning_curve(h, _fitter(h, settings, sets["val"], sets["test"]), sets["train"], list(g.fractions),
                             int(g.resamples), int(cfg.seed), log=log, min_train=min_train)
        points += pts
        trends[h] = trend(pts, sets["test"].y, samples, share=float(g.share), n_boot=int(g.n_boot), seed=int(cfg.seed))
    pf = points_frame(points)
    pf.to_csv(out / "gap_points.csv", index=False)
    tf = pd.DataFrame([t.__dict__ for t in trends.values()])
    tf.to_csv(out / "gap_trend.csv", index=False)
    full = max(p.n_train for p in points)
    frame = pd.DataFrame({"id": test.inputs.ids, "domain": test.inputs.domains, "y_true": test.y,
                          "prompt_tokens": test.inputs.n_prompt_tokens, "capped_frac": test.capped_frac})
    if frame["prompt_tokens"].isna().any():
        raise DataError("gap: the feature store has no n_prompt_tokens column for the prompt-length breakdown")
    per_seed = {h: [p.y_pred for p in sorted(points, key=lambda p: p.resample) if p.head == h and p.n_train == full]
                for h in heads}
    for h, path in extra.items():
        per_seed[h] = extra_predictions(path, list(test.inputs.ids))
    for h, preds in per_seed.items():
        frame[f"pred:{h}"] = preds[0]
    every = [*heads, *extra]
    reach = reach_table(per_seed, test.y, samples, share=float(g.share), n_boot=int(g.n_boot), seed=int(cfg.seed))
    reach.to_csv(out / "gap_reach.csv", index=False)
    bd = pd.concat([breakdown(frame, samples, every, d, n_boot=int(g.n_boot), seed=int(cfg.seed)) for d in DIMENSIONS],
                   ignore_index=True)
    bd.to_csv(out / "gap_breakdown.csv", index=False)
    noise = noise_table(frame, samples, every, factor=float(g.factor), n_boot=int(g.n_boot), seed=int(cfg.seed))
    noise.to_csv(out / "gap_noise.csv", index=False)
    mix = domain_mix(frame, all_wrong(frame, samples, every, float(g.factor)))
    mix.to_csv(out / "gap_wrong_domains.csv")
    t0 = trends[heads[0]]
    others = {h: [float(spearman_rows(test.y[None, :], p[None, :])[0]) for p in per_seed[h]] for h in extra}
    learning_curve_figure(pf, {h: (t.a, t.b, t.c) for h, t in trends.items()}, t0.ceiling, float(g.share),
                          out / "learning_curve.png", title=f"{cfg.model.name} on {cfg.data.name}: learning curves",
                          others=others, others_at=len(first["train"]), ceiling_ci=t0.ceiling_ci)
    (out / "gap.md").write_text(render(cfg, pf, trends, bd, noise, mix, every, reach) + "\n", encoding="utf-8")
    return {"points": pf, "trend": tf, "breakdown": bd, "noise": noise, "reach": reach}


def _ci(v: float, lo: float, hi: float, fmt: str = "{:.3f}") -> str:
    if not math.isfinite(v):
        return "—"
    return f"{fmt.format(v)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def _size(v: float) -> str:
    return "never (asymptote below)" if math.isinf(v) else f"{v:,.0f}"


def render(cfg: DictConfig, pf: pd.DataFrame, trends: dict[str, Trend], bd: pd.DataFrame, noise: pd.DataFrame,
           mix: pd.DataFrame, heads: list[str], reach: pd.DataFrame) -> str:
    g = cfg.gap
    share = float(g.share)
    t0 = next(iter(trends.values()))
    lines = [f"## Does any head reach {share:.2f} of the noise ceiling? ({cfg.model.name} on {cfg.data.name}, pooled test)",
             "",
             f"Each head at its full train set: its test Spearman averaged over its seeds (the curve heads: their "
             "draws at the full train set, which differ only in initialisation, so a head with none repeats one "
             "fit) and that mean's share of the test "
             f"noise ceiling ({_ci(t0.ceiling, *t0.ceiling_ci)}), 95% bootstrap intervals over test prompts (the same "
             "replicates for the heads and the ceiling) in which each head's seeds are also redrawn; reached where the "
             f"share's interval lies at or above {share:.2f}, not reached where it lies below, else not shown either "
             "way.",
             "",
             "| head | seeds | test Spearman, mean over seeds [95% CI] | sd over seeds | share of the ceiling [95% CI] | "
             f"{share:.2f} of the ceiling |",
             "|---|---:|---:|---:|---:|---|"]
    for r in reach.to_dict("records"):
        sd = f"{r['seed_sd']:.3f}" if math.isfinite(r["seed_sd"]) else "—"
        lines.append(f"| {r['head']} | {r['seeds']} | {_ci(r['spearman'], r['spearman_low'], r['spearman_high'])} | "
                     f"{sd} | {_ci(r['share'], r['share_low'], r['share_high'])} | {r['verdict']} |")
    lines += ["", f"## Learning curves: {cfg.model.name} on {cfg.data.name}",
             "",
             f"Each point: the head fitted on a fraction of the train prompts drawn per domain ({int(g.resamples)} "
             "draws per fraction, seeds seed + draw), with its own search and budget, selected on the full validation "
             "split, scored on the full test split (pooled Spearman with the mean of each prompt's sampled lengths).",
             "",
             "| head | train prompts | fraction | test Spearman, mean ± sd over draws | range over draws | "
             "val Spearman (mean) | share of the test ceiling |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for (h, n), x in pf.groupby(["head", "n_train"], sort=True):
        t = trends[h]
        lines.append(f"| {h} | {n:,} | {x['fraction'].iloc[0]:g} | {x['test_spearman'].mean():.3f} ± "
                     f"{x['test_spearman'].std(ddof=1) if len(x) > 1 else 0:.3f} | {x['test_spearman'].min():.3f} – "
                     f"{x['test_spearman'].max():.3f} | {x['val_spearman'].mean():.3f} | "
                     f"{x['test_spearman'].mean() / t.ceiling:.3f} |")
    lines += ["", f"### Fitted trend ρ(n) = a − b·n^(−c) and the train size for {share:.2f} of the ceiling", "",
              f"Intervals: 95% percentile bootstrap over test prompts ({int(g.n_boot)} replicates; each replicate "
              "recomputes every fit's Spearman and the ceiling on the same resampled prompts, redraws each train "
              f"size's {int(g.resamples)} draws with replacement and refits the curve), so they cover the test set's "
              "size and the train draws' spread; with so few draws the latter is itself roughly estimated.",
              "",
              "| head | noise ceiling (test) | target | share of the ceiling at all train prompts [95% CI] | gain over "
              "the last doubling [95% CI] | asymptote a [95% CI] | train prompts to reach the target [95% CI] | "
              "replicates that reach it |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for h, t in trends.items():
        lines.append(f"| {h} | {_ci(t.ceiling, *t.ceiling_ci)} | {t.target:.3f} | {_ci(t.full_share, *t.full_share_ci)} | "
                     f"{_ci(t.gain_last_doubling, *t.gain_last_doubling_ci, fmt='{:+.3f}')} | {_ci(t.a, *t.a_ci)} | "
                     f"{_size(t.n_star)} [{_size(t.n_star_ci[0])}, {_size(t.n_star_ci[1])}] | "
                     f"{100 * t.reachable_share:.0f}% |")
    lines += ["", "## The test error broken down", "",
              "Per bin: the bin's own noise ceiling and each head's Spearman inside it (a narrower range than the "
              "pooled one), and the median absolute log error |log1p ŷ − log1p y| (0.69 = off by 2×); 95% bootstrap "
              "intervals over the bin's prompts. Heads: the full-train fits above (first draw)"
              + (f" and {', '.join(h for h in heads if h not in trends)} (its train run's predictions, first seed)."
                 if any(h not in trends for h in heads) else "."),
              "",
              "A '—' ceiling: the bin's prompts' own samples do not rank them alike (their mean pairwise Spearman is "
              "not above 0), so no ceiling is defined there; a '—' Spearman: the target does not vary in the bin "
              "(every sample capped). The answer-length bins are cut on the target itself: inside one, the prompts' "
              "targets differ little, so a Spearman there ranks within a narrow range and is not comparable with "
              "the pooled one."]
    for dim, x in bd.groupby("dimension", sort=False):
        head_cols = " | ".join(f"{h} Spearman | {h} median abs log error" for h in heads)
        lines += ["", f"### By {dim}", "", f"| {dim} | n | noise ceiling | {head_cols} |",
                  "|---|---:|---:|" + "---:|" * (2 * len(heads))]
        for r in x.to_dict("records"):
            cells = " | ".join(f"{_ci(r[f'{h}:spearman'], r[f'{h}:spearman_low'], r[f'{h}:spearman_high'])} | "
                               f"{_ci(r[f'{h}:log_error'], r[f'{h}:log_error_low'], r[f'{h}:log_error_high'], '{:.2f}')}"
                               for h in heads)
            lines.append(f"| {r['bin']} | {r['n']} | {_ci(r['ceiling'], r['ceiling_low'], r['ceiling_high'])} | "
                         f"{cells} |")
    lines += ["", f"## Prompts every head gets wrong (off by more than {float(g.factor):g}×), and their own noise", "",
              "Spread: sd of log1p over the prompt's own samples (median, 95% bootstrap interval); its standard "
              "error sd/√k is how far the target (their mean) may sit from the prompt's expected length. "
              "Within 2 SE: the share whose error (mean over heads) is no larger than twice that.",
              "",
              "| prompts | n | share of test | with a capped sample | sample spread (log) [95% CI] | standard error "
              "of the target (log) | median abs log error | error within 2 SE of their own target |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in noise.to_dict("records"):
        if not r["n"]:
            lines.append(f"| {r['group']} | 0 | 0 | — | — | — | — | — |")
            continue
        lines.append(f"| {r['group']} | {r['n']} | {r['share']:.3f} | {r['capped']:.2f} | "
                     f"{_ci(r['spread'], r['spread_low'], r['spread_high'], '{:.2f}')} | {r['se']:.2f} | "
                     f"{r['log_error']:.2f} | {r['within_2se']:.2f} |")
    wrong, rest = noise.iloc[0], noise.iloc[1]
    lines += ["", noise_sentence(int(wrong["n"]), float(wrong.get("within_2se", math.nan)), int(rest["n"]),
                                 float(rest.get("within_2se", math.nan)))]
    lines += ["", "### Which domains they come from", "", "| domain | every head wrong | test prompts | share |",
              "|---|---:|---:|---:|"]
    for d, r in mix.iterrows():
        lines.append(f"| {d} | {int(r['wrong'])} | {int(r['test'])} | {r['share']:.3f} |")
    return "\n".join(lines)


def run_gap_stage(cfg: DictConfig, out: str | Path) -> Path:
    """The gap stage (scripts/gap.py): `run_gap` into `out`; prints gap.md. Returns the folder."""
    run_gap(cfg, out)
    print((Path(out) / "gap.md").read_text(encoding="utf-8"))
    return Path(out)
