"""T7's shared split as the CASTILLO run recorded it (t7-castillo/castillo_summary.json: the run's summary.json,
copied as written; its `split_sizes`, `near_duplicates` and `truncation` blocks), rendered as one paragraph."""

from __future__ import annotations

from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

SUMMARY = f"{DATA}/t7-castillo/castillo_summary.json"


def _count(ids: object) -> str:
    """The run records the test prompts with a twin as their ids (an older record: their count)."""
    n = len(ids) if isinstance(ids, list) else int(ids)  # type: ignore[call-overload]
    return "none" if n == 0 else f"{n:,}"


@helper
def castillo_split(res: Results) -> str:
    """How many prompts each part holds, the near-duplicate rule the split grouped by, how many groups it
    formed, and how many test prompts still have a train or validation twin at the rule's threshold and at
    Jaccard 0.94; how many prompts were truncated for the prefill."""
    s = res.json(SUMMARY)
    try:
        sizes, near, trunc = s["split_sizes"], s["near_duplicates"], s["truncation"]
        parts = f"{sizes['train']:,} train, {sizes['val']:,} validation and {sizes['test']:,} test prompts"
        limit = trunc["max_prompt_tokens"]
        cut = sum(v["truncated"] for v in trunc.values() if isinstance(v, dict))
        rule = near["rule"]
    except KeyError as e:
        res.fail(SUMMARY, f"no {e} where the split's record should have it")
    except (TypeError, AttributeError) as e:
        res.fail(SUMMARY, f"the split's record is not shaped as a castillo run writes it ({e})")
    if rule is None:
        grouping = "Near-duplicates were not grouped (`data.near_duplicates: null`)."
    else:
        grouping = (f"Near-duplicates are grouped before the split, so a group stays in one part: two prompts are "
                    f"near-duplicates when their sets of word {rule['ngram']}-grams reach Jaccard "
                    f"{rule['threshold']:g}, and a group is a connected component of that relation "
                    f"({near['groups_over_one']} groups of two or more, {near['prompts_in_them']} prompts).")
    twins = [f"at Jaccard ≥ {k.rsplit('_', 1)[1]}: {_count(v)}" for k, v in near.items()
             if k.startswith("test_with_twin_at_")]
    twin_text = f" Test prompts with a train or validation twin, {'; '.join(twins)}." if twins else ""
    cut_text = (f" {cut} prompts longer than {limit} tokens are cut to {limit} for the prefill "
                "(`lengthpred.prompting.truncate` keeps their start and their end)." if limit else
                " No prompt is cut for the prefill (`features.max_prompt_tokens: null`).")
    return f"The shared split holds {parts}, stratified by dataset. {grouping}{twin_text}{cut_text}"


@helper
def castillo_finetuned_fits(res: Results) -> str:
    """On which lengths the fine-tuned heads were fitted besides the mean over models, and with how many seeds, as
    the run's fit records say (heads not fitted on every model: the proxies and lora)."""
    fits = res.json(SUMMARY).get("fits")
    if not isinstance(fits, list) or not fits:
        res.fail(SUMMARY, "no `fits` list where the run's fit records should be")
    models = {f["fit"] for f in fits if f.get("fit") != "all-models"}
    by_head: dict[str, set[str]] = {}
    for f in fits:
        by_head.setdefault(f["head"], set()).add(f["fit"])
    partial = {h: fs for h, fs in by_head.items() if "all-models" in fs and fs - {"all-models"} < models}
    if not partial:
        res.fail(SUMMARY, "no head fitted on only some models")
    own = sorted({m.split("--", 1)[-1] for fs in partial.values() for m in fs - {"all-models"}})
    seeds = sorted({int(f["n_seeds"]) for f in fits if f["head"] in partial and f.get("n_seeds")})
    said = "one seed each" if seeds == [1] else f"{' or '.join(map(str, seeds))} seeds"
    return f"on the mean over models and on {' and '.join(own)}'s own lengths, {said}"
