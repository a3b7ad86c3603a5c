"""What T7_pairs says, as the T7 page's sentence: each compared head against its reference on CASTILLO, paired on
the same test prompts (t7-castillo/castillo_T7_pairs.csv, the castillo stage's `crossmodel.pairs`)."""

from __future__ import annotations

from docsgen.numbers import parse_cell
from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

PAIRS = f"{DATA}/t7-castillo/castillo_T7_pairs.csv"
METRIC = "Metric (prediction scored: head, reference)"
DIFF = "Head − reference [95% CI]"
_COLS = ["Head", "Reference", "Fit", "Model", METRIC, "Head's seeds", "Reference's seeds", DIFF]


def _side(metric: str, lo: float, hi: float) -> str:
    """Which head the interval favours: Spearman higher is better, MAE lower."""
    better = (lo > 0) if metric.startswith("Spearman") else (hi < 0)
    worse = (hi < 0) if metric.startswith("Spearman") else (lo > 0)
    return "head" if better else "reference" if worse else "neither"


def _seeds(n: object) -> str:
    return f"{n} seed" + ("" if str(n) == "1" else "s")


@helper
def castillo_pairs_sentence(res: Results) -> str:
    """Per (head, reference, fit kind) and metric: on how many of the scored models the paired interval favours
    the head, the reference, or neither; an own fit on one model is quoted with its difference and interval."""
    df = res.csv(PAIRS, _COLS)
    out = []
    for (head, ref), g in df.groupby(["Head", "Reference"], sort=False):
        scored = g[g["Head's seeds"] != ""]  # a row that could not be compared has a note and no seeds
        if scored.empty:
            continue
        n_head, n_ref = scored["Head's seeds"].iloc[0], scored["Reference's seeds"].iloc[0]
        seeds = f"{head}: {_seeds(n_head)}, {ref}: {_seeds(n_ref)}"
        parts = []
        for (fit, metric), h in g.groupby(["Fit", METRIC], sort=False):
            cells = [(m, parse_cell(str(c))) for m, c in zip(h["Model"], h[DIFF], strict=True)]
            cells = [(m, c) for m, c in cells if c is not None and c.has_interval]
            if not cells:
                continue
            name = metric.split(" (")[0]
            if len(cells) == 1:
                m, c = cells[0]
                parts.append(f"{fit}, {name} on {m}: {c.text(signed=True)}")
                continue
            sides = [_side(metric, c.lo, c.hi) for _, c in cells]
            parts.append(f"{fit}, {name}: the interval favours {head} on {sides.count('head')} of {len(cells)} "
                         f"models, {ref} on {sides.count('reference')}, neither on {sides.count('neither')}")
        if parts:
            out.append(f"{head} against {ref}, paired on the same test prompts ({seeds}; difference {head} − {ref} "
                       f"with its 95% interval): " + "; ".join(parts) + ".")
    if not out:
        res.fail(PAIRS, "no row with a difference and its interval")
    return " ".join(out) + (" The models share their test prompts, so counts over models describe these fits; they "
                            "are not tests. The intervals carry the prompts' noise only: what another seed would "
                            "give is not in them.")
