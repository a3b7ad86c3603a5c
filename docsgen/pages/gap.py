"""Where the gap to the noise ceiling is (scripts/gap.py at bench, ingested as t1-in-domain/bench_gap-*.csv): the
sentence T1 and the gap page state, rendered from the reach table (-1), the learning curves (-2) and the fitted
trend (-3), so no number in the prose is typed."""

from __future__ import annotations

import re

from docsgen.numbers import Stat, parse_cell
from docsgen.registry import helper
from docsgen.results import Results
from lengthpred.eval.error_breakdown import noise_sentence

REACH, CURVE, TREND = (f"t1-in-domain/bench_gap-{k}.csv" for k in (1, 2, 3))
NOISE = "t1-in-domain/bench_gap-8.csv"
_DATA = "docs/results/data/"


def _and(names: list[str]) -> str:
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def _reach_phrase(r) -> str:
    return f"{r['head']} {r['share of the ceiling [95% CI]']} of the ceiling ({r['0.90 of the ceiling']})"


def _stat(res: Results, rel: str, what: str, cell: object) -> Stat:
    stat = parse_cell(str(cell))
    if stat is None:
        res.fail(rel, f"{what}: {cell!r} is not a number")
    return stat


@helper
def gap_ceiling(res: Results) -> str:
    """The test noise ceiling the gap stage measured against."""
    trend = res.csv(_DATA + TREND, ["head", "noise ceiling (test)"])
    return str(trend["noise ceiling (test)"].iloc[0])


@helper
def gap_summary(res: Results) -> str:
    """Does any head reach the share of the ceiling, and what the learning curves say it would take."""
    reach = res.csv(_DATA + REACH, ["head", "share of the ceiling [95% CI]", "0.90 of the ceiling"])
    curve = res.csv(_DATA + CURVE, ["head", "train prompts", "fraction"])
    trend = res.csv(_DATA + TREND, ["head", "noise ceiling (test)", "target", "asymptote a [95% CI]",
                                     "gain over the last doubling [95% CI]",
                                     "train prompts to reach the target [95% CI]", "replicates that reach it"])
    full = max(int(str(n).replace(",", "")) for n in curve["train prompts"])
    verdicts = reach["0.90 of the ceiling"].astype(str)
    opening = ("A head reaches" if verdicts.str.startswith("reached").any() else
               "No head reaches" if verdicts.str.startswith("not reached").all() else "No head is shown to reach")
    out = [opening + " 0.90 of the test noise ceiling "
           f"({trend['noise ceiling (test)'].iloc[0]}, target Spearman {trend['target'].iloc[0]}) at the full "
           f"{full:,} train prompts (each head's test Spearman averaged over its seeds): "
           + "; ".join(_reach_phrase(r) for _, r in reach.iterrows()) + ". "
           f"The learning curves of {_and(list(trend['head']))} (each refitted with its own search on "
           f"fractions {min(float(f) for f in curve['fraction']):g} to 1 of the train prompts, 3 draws each), fitted as "
           "a − b·n^(−c), say what more data would do: "]
    parts = []
    for _, t in trend.iterrows():
        parts.append(f"{t['head']}: {t['gain over the last doubling [95% CI]']} over the last doubling, asymptote "
                     f"{t['asymptote a [95% CI]']}, train prompts to reach the target "
                     f"{t['train prompts to reach the target [95% CI]']} ({t['replicates that reach it']} of the "
                     "bootstrap replicates reach it)")
    return "".join(out) + "; ".join(parts) + ". " + _rising(res, trend)


def _rising(res: Results, trend) -> str:
    """Whether any curve is shown to be still rising: its last doubling's gain interval lies above zero."""
    gain = "gain over the last doubling [95% CI]"
    rising = []
    for _, t in trend.iterrows():
        stat = _stat(res, _DATA + TREND, gain, t[gain])
        if not stat.has_interval:
            res.fail(_DATA + TREND, f"{gain}: {t[gain]!r} has no interval")
        if stat.lo > 0:
            rising.append(str(t["head"]))
    if rising:
        return (f"{_and(rising)}'s curve is still rising (its last doubling's interval lies above zero): a longer "
                "bench trace (`make bench-trace` resumes it) would say more.")
    return ("No curve is shown to be still rising (every last doubling's interval includes zero or lies below it), so the bench trace "
            "was not extended.")


@helper
def gap_trend(res: Results, head: str) -> dict:
    """One head's fitted learning-curve trend: its asymptote, the train prompts it needs for the target share of the
    ceiling (with the interval), that share, and the train prompts it had."""
    trend = res.csv(_DATA + TREND, ["head", "asymptote a [95% CI]", "train prompts to reach the target [95% CI]",
                                    "noise ceiling (test)", "target"])
    curve = res.csv(_DATA + CURVE, ["head", "train prompts"])
    row = res.row(_DATA + TREND, trend, head=head)
    need = str(row["train prompts to reach the target [95% CI]"]).replace(" (asymptote below)", "")
    m = re.fullmatch(r"(?P<point>never|[\d,]+) \[(?P<low>never|[\d,]+), (?P<high>never|[\d,]+)\]", need)
    if m is None:
        res.fail(_DATA + TREND, f"train prompts to reach the target: {need!r} is not 'n [low, high]'")
    return {"asymptote": str(row["asymptote a [95% CI]"]).split(" [")[0], "need": m["point"],
            "share": f"{float(row['target']) / _stat(res, _DATA + TREND, 'ceiling', row['noise ceiling (test)']).value:.2f}",
            "interval": f"95% CI {m['low']} to {m['high']}",
            "had": f"{max(int(str(n).replace(',', '')) for n in curve['train prompts']):,}"}


@helper
def gap_noise(res: Results) -> str:
    """What the table of the prompts every head gets wrong says about their own samples' noise."""
    within = "error within 2 SE of their own target"
    df = res.csv(_DATA + NOISE, ["prompts", "n", within])
    wrong, rest = df.iloc[0], df.iloc[1]

    def share(v: object) -> float:
        stat = parse_cell(str(v))
        return stat.value if stat is not None else float("nan")

    return noise_sentence(int(wrong["n"]), share(wrong[within]), int(rest["n"]), share(rest[within]))
