"""The lora head's bench T1 rows (its own train run, scored by scripts/evaluate.py and ingested as
t1-in-domain/bench_lora.csv) set beside the probe's and the linear readout's rows of bench T1: the sentence the
T1 page states, rendered from both tables so no number in it is typed."""

from __future__ import annotations

from docsgen.numbers import parse_cell
from docsgen.pages.lora_cost import LORA_FIT, planned_seeds
from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

T1 = f"{DATA}/t1-in-domain/bench_T1.csv"
T1_LORA = f"{DATA}/t1-in-domain/bench_lora.csv"
_COLS = ["Domain", "Head", "Spearman ↑", "Spearman over seeds ↑", "Noise ceiling (estimate) ↑",
         "MAE of median (tokens) ↓", "n"]


def _point(cell: str) -> float:
    return float(str(cell).split(" [")[0].split(" ±")[0])


@helper
def lora_vs_probe(res: Results) -> str:
    """The pooled ('all') rows of lora, probe and linear: Spearman with its interval, the seed mean ± sd, the share
    of the test ceiling (point estimates), unpaired."""
    t1, lora = res.csv(T1, _COLS), res.csv(T1_LORA, _COLS)
    rows = {h: res.row(T1, t1, Domain="all", Head=h) for h in ("probe", "linear")}
    rows["lora"] = res.row(T1_LORA, lora, Domain="all", Head="lora")
    ceiling = _point(rows["lora"]["Noise ceiling (estimate) ↑"])

    def phrase(h: str) -> str:
        r = rows[h]
        seeds = r["Spearman over seeds ↑"]
        over = f", over seeds {seeds}" if seeds not in ("—", "") else ""
        return (f"{h} {r['Spearman ↑']}{over}, {_point(r['Spearman ↑']) / ceiling:.2f} of the ceiling, MAE of median "
                f"{r['MAE of median (tokens) ↓']} tokens")

    lo = lora_summary(res)
    caveat = (f" The lora head has {lo['seeds']} of its {lo['planned']} seeds so far, and is not ranked against the "
              "other heads until it has them (its seed-to-seed spread is not known yet)."
              if lo["seeds"] < lo["planned"] else "")
    return (f"on the same {rows['lora']['n']} test prompts (pooled; first seed's Spearman with its 95% bootstrap "
            f"interval; share of the test noise ceiling {rows['lora']['Noise ceiling (estimate) ↑']} as point "
            "estimates): " + "; ".join(phrase(h) for h in ("lora", "probe", "linear")) + "." + caveat)


@helper
def lora_summary(res: Results) -> dict:
    """The lora head's pooled test Spearman, its share of the test ceiling (point estimates), its seeds so far and
    the seeds its fit runs over."""
    lora = res.csv(T1_LORA, _COLS)
    r = res.row(T1_LORA, lora, Domain="all", Head="lora")
    seeds = str(r["Spearman over seeds ↑"])
    n_seeds = int(seeds.rsplit("(", 1)[1].rstrip(")")) if "(" in seeds else 1
    return {"spearman": r["Spearman ↑"], "share": f"{_point(r['Spearman ↑']) / _point(r['Noise ceiling (estimate) ↑']):.0%}",
            "seeds": n_seeds, "planned": planned_seeds(res)}


@helper
def lora_candidates(res: Results) -> str:
    """Every candidate the lora head's search tried, per seed: its settings, its val Spearman (fitted on the search's
    train subsample) and its fit time, the chosen one marked (benchmarks/record_lora_fit.py's record)."""
    r = res.json(LORA_FIT)["result"]
    rows = ["| seed | adapted layers | rank | lr | epochs | val Spearman (search fit) | fit (min) | chosen |",
            "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for s in r["seeds"]:
        for c in sorted(s["candidates"], key=lambda c: -c["val_spearman"]):
            p = c["params"]
            mark = "yes" if p == s["selected"] else ""
            rows.append(f"| {s['random_state']} | {p['lora_layers']} | {p['rank']} | {p['lr']:g} | {p['epochs']} | "
                        f"{c['val_spearman']:.3f} | {c['fit_seconds'] / 60:.1f} | {mark} |")
    return (f"Each candidate was fitted on {r['search']['n_search_train']} train prompts and scored on the "
            f"{r['n_val']} validation prompts; the chosen one was then refitted on all {r['train_prompts']:,}.\n\n"
            + "\n".join(rows) + "\n")


PAIRS = f"{DATA}/t1-in-domain/bench_lora_pairs.csv"
_PAIR_COLS = ["head", "seeds", "metric (prediction scored)", "seed mean ± sd", "difference vs probe [95% CI]",
              "p (one-sided)"]


def _side(ci: str) -> int:
    """-1, 0 or +1: whether a "d [lo, hi]" interval lies below zero, covers it, or lies above it."""
    s = parse_cell(ci)
    return -1 if s.hi < 0 else (1 if s.lo > 0 else 0)


@helper
def lora_vs_probe_verdict(res: Results) -> str:
    """What the paired interval says of lora against the probe on Spearman (higher is better) and on the MAE of the
    median (lower is better), once lora has every planned seed; empty before (one seed is not a ranking)."""
    lo = lora_summary(res)
    if lo["seeds"] < lo["planned"]:
        return ""
    df = res.csv(PAIRS, _PAIR_COLS)
    words = {"spearman": ("ranks worse than", "is level with", "ranks better than"),
             "mae": ("errs less than", "errs as much as", "errs more than")}
    out = []
    for _, r in df[df["head"] == "lora"].iterrows():
        metric = r["metric (prediction scored)"].split(" (")[0]
        if metric in words:
            out.append(words[metric][_side(r["difference vs probe [95% CI]"]) + 1])
    if not out:
        res.fail(PAIRS, "no lora row to judge")
    fit = res.json(LORA_FIT)["result"]
    return (f"With its {lo['seeds']} seeds, lora " + " and ".join(out) + " the probe (95% paired bootstrap "
            "intervals over the test prompts; an interval covering zero counts as level). Its search had the same "
            f"number of candidates as the probe's, but fitted each on {fit['search']['n_search_train']:,} train "
            f"prompts where the probe's used all {fit['train_prompts']:,}, so its "
            "chosen settings may be worse than a full search would find.")


@helper
def lora_pairs(res: Results) -> str:
    """The lora head against the probe on the same test prompts (scripts/compare_seeds.py, ingested as
    t1-in-domain/bench_lora_pairs.csv): each metric's difference of seed means with its paired interval."""
    df = res.csv(PAIRS, _PAIR_COLS)
    probe = df[(df["head"] == "probe") & df["metric (prediction scored)"].str.startswith("spearman")]
    if probe.empty:
        res.fail(PAIRS, "no probe spearman row")
    p = probe.iloc[0]
    parts = [f"{r['metric (prediction scored)'].split(' (')[0]} {r['difference vs probe [95% CI]']} (one-sided p that "
             f"lora is better: {r['p (one-sided)']})" for _, r in df[df["head"] == "lora"].iterrows()]
    return (f"Paired with the probe on the same test prompts (the probe refitted, {p['seeds']} seeds, Spearman seed mean "
            f"{p['seed mean ± sd']}), lora minus probe, seed means, 95% paired bootstrap interval over prompts: "
            + "; ".join(parts) + ".")
