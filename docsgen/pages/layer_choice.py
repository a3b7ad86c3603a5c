"""Why the readout keeps layer 20 where validation prefers another, with both scores side by side: the configured
layer and the layer the validation curve chooses, each with its validation and test Spearman, read from the
committed layer-curve rows (t1-in-domain/bench_layer_curve-*.csv)."""

from __future__ import annotations

from docsgen import mdtable
from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

CHOSEN = f"{DATA}/t1-in-domain/bench_layer_curve-1.csv"
PER_LAYER = f"{DATA}/t1-in-domain/bench_layer_curve-2.csv"


@helper
def layer_choice(res: Results, configured: int = 20) -> str:
    """Per readout: the configured layer and the validation-chosen one, their val and test Spearman."""
    chosen = res.csv(CHOSEN, columns=("Head", "Chosen layer", "Layers swept"))
    per = res.csv(PER_LAYER, columns=("layer", "linear val", "linear test", "probe val", "probe test"))
    rows = []
    for head in ("linear", "probe"):
        c = res.row(CHOSEN, chosen, Head=head)
        for layer, how in ((str(configured), "configured (set by the pilot, before the bench)"),
                           (c["Chosen layer"], f"chosen on validation (argmax over {c['Layers swept']} layers)")):
            r = res.row(PER_LAYER, per, layer=layer)
            rows.append([head, layer, how, r[f"{head} val"], r[f"{head} test"]])
    return mdtable.render(mdtable.MdTable(["readout", "layer", "how", "val Spearman", "test Spearman [95% CI]"],
                                          ["---", "---:", "---", "---:", "---:"], rows))


@helper
def layer_choice_sentence(res: Results, configured: int = 20) -> str:
    """The README's short form of `layer_choice`: the layer validation would choose for each readout, with its
    validation Spearman beside the configured layer's (validation only: the choice is not made on test)."""
    chosen = res.csv(CHOSEN, columns=("Head", "Chosen layer"))
    per = res.csv(PER_LAYER, columns=("layer", "linear val", "probe val"))
    at = res.row(PER_LAYER, per, layer=str(configured))
    parts = []
    for head in ("linear", "probe"):
        layer = res.row(CHOSEN, chosen, Head=head)["Chosen layer"]
        name = "the linear readout" if head == "linear" else "the probe"
        if str(layer) == str(configured):
            parts.append(f"layer {configured} for {name} too (validation Spearman {at[f'{head} val']})")
            continue
        r = res.row(PER_LAYER, per, layer=layer)
        parts.append(f"layer {layer} for {name} (validation Spearman {r[f'{head} val']} against "
                     f"{at[f'{head} val']} at {configured})")
    return "validation would choose " + " and ".join(parts)
