"""Checks on stored generations: do the stored lengths agree with re-tokenising the stored texts?"""

from __future__ import annotations

from typing import Any


def retokenised_agreement(generations, tokenizer, limit: int | None = None) -> dict[str, Any]:
    """Re-tokenise each stored `text` and compare with the stored `length`.

    A sampled answer need not be the tokenizer's own (canonical) spelling of its text, so exact
    agreement is only guaranteed for canonical answers; `canonical_exact` must be 1.0, `exact` is
    reported (≈1 for a trained model, lower for random weights).
    """
    rows = generations.select(range(min(limit, len(generations)))) if limit else generations
    n = exact = n_canon = canon_exact = 0
    abs_diff = 0
    bad_len = 0
    for r in rows:
        re_ids = tokenizer(r["text"], add_special_tokens=False)["input_ids"]
        n += 1
        exact += len(re_ids) == r["length"]
        abs_diff += abs(len(re_ids) - r["length"])
        if "token_ids" in r:
            bad_len += len(r["token_ids"]) != r["length"]
            if list(re_ids) == list(r["token_ids"]):
                n_canon += 1
                canon_exact += len(re_ids) == r["length"]
    return {
        "n": n,
        "exact": exact / n if n else float("nan"),
        "mean_abs_diff": abs_diff / n if n else float("nan"),
        "n_canonical": n_canon,
        "canonical_exact": canon_exact / n_canon if n_canon else float("nan"),
        "n_length_ne_token_ids": bad_len,
    }
