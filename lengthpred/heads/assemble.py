"""Turn the other stages' artefacts (prompt table, splits.json, targets, FeatureSet) into LabeledSets.

Targets come as `lengthpred.targets.target_frame`'s frame (indexed by id: y, n_samples, capped_frac).

Split scope: the in-domain splits of every domain pooled (`indomain/<domain>/{train,val,test}` in
splits.json), so one head is fitted per run and scored per domain from its predictions; ForeLen-style
subsets are extra test sets (ids that are in train are dropped from them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.heads.base import HeadInput, LabeledSet
from lengthpred.names import FeatureKey, SplitName

log = logging.getLogger(__name__)


def prompt_text(messages: Sequence[Mapping[str, str]]) -> str:
    """The text a proxy model reads: every turn's content, one per line (roles dropped)."""
    return "\n".join(str(m.get("content", "")) for m in messages)


def indomain_ids(splits: Mapping[str, Any]) -> dict[str, list[str]]:
    """{train, val, test} ids: `indomain["all"]` when the data stage wrote one (a trace), else the
    per-domain splits pooled (each id once)."""
    indomain = splits.get("indomain") or {}
    if not indomain:
        raise DataError("splits.json has no in-domain splits")
    groups = [indomain["all"]] if "all" in indomain else [indomain[d] for d in sorted(indomain)]
    out: dict[str, list[str]] = {}
    for part in ("train", "val", "test"):
        out[part] = list(dict.fromkeys(i for g in groups for i in g.get(part, [])))
    return out


MIN_SUBSET = 30  # a ForeLen subset with fewer prompts gives intervals too wide to read (e.g. [58, 58])


def forelen_ids(splits: Mapping[str, Any], exclude: set[str]) -> dict[str, list[str]]:
    """ForeLen subsets (minus `exclude`, the ids a head trained or selected on) that hold at least
    MIN_SUBSET prompts; smaller ones are logged and not scored."""
    out = {}
    for k, v in (splits.get("forelen") or {}).items():
        if not isinstance(v, list):
            continue
        ids = [i for i in v if i not in exclude]
        if len(ids) >= MIN_SUBSET:
            out[str(SplitName.forelen(k))] = ids
        elif v:
            log.warning("%s: %d prompts left (< %d): not scored", SplitName.forelen(k), len(ids), MIN_SUBSET)
    return out


def labeled_set(
    ids: Sequence[str],
    prompts_by_id: Mapping[str, Mapping[str, Any]],
    targets: pd.DataFrame,
    *,
    features: Any = None,
    feature: str | Sequence[str] | None = None,
    token_layer: int | None = None,
    split: str = "",
) -> LabeledSet:
    """One split as a LabeledSet; ids without a target (not generated / skipped) are dropped, ids
    without a prompt record or features are an error (the artefacts disagree). `feature`: one column, or
    several side by side in the order given (the concat head). `token_layer` also loads that layer's
    token-level inputs (`FeatureSet.token_inputs`)."""
    ids = [i for i in ids if i in targets.index]
    missing = [i for i in ids if i not in prompts_by_id]
    if missing:
        raise DataError(f"{split}: {len(missing)} ids have targets but no prompt record (e.g. {missing[:3]})")
    recs = [prompts_by_id[i] for i in ids]
    t = targets.loc[ids]
    x = n_tok = tokens = None
    if features is not None:
        sub = features.subset(ids)
        if feature is not None:
            names = [feature] if isinstance(feature, str) else list(feature)
            for name in names:
                if name not in features.names:
                    stored = ", ".join(n for n in features.names if FeatureKey.is_key(n))[:300]
                    raise DataError(f"feature {name!r} was not extracted; stored: {stored} ...")
            x = sub.get(names[0]) if len(names) == 1 else np.concatenate([sub.get(n) for n in names], axis=1)
        if token_layer is not None:
            tokens = sub.token_inputs(token_layer)
        if "n_prompt_tokens" in features.names:
            n_tok = sub.get("n_prompt_tokens")[:, 0]
    inputs = HeadInput(
        ids=list(ids),
        features=x,
        tokens=tokens,
        texts=[prompt_text(r["messages"]) for r in recs],
        messages=[list(r["messages"]) for r in recs],
        domains=[str(r.get("domain", "")) for r in recs],
        n_prompt_tokens=n_tok,
    )
    lengths = capped = None
    if "lengths" in t.columns and "finish_reasons" in t.columns:  # every sample, for heads that fit on samples
        lengths = [np.asarray(v, dtype=np.float64) for v in t["lengths"]]
        capped = [np.asarray([r == "length" for r in v], dtype=bool) for v in t["finish_reasons"]]
    return LabeledSet(
        inputs,
        t["y"].to_numpy(dtype=np.float64),
        n_samples=t["n_samples"].to_numpy(),
        capped_frac=t["capped_frac"].to_numpy(dtype=np.float64),
        sample_lengths=lengths,
        sample_capped=capped,
    )


def per_domain_split_names(data: LabeledSet, part: str = "test") -> list[str]:
    """`indomain/<domain>/<part>` for each row (the predictions file's split column)."""
    return [str(SplitName.indomain(d, part)) for d in (data.inputs.domains or [""] * len(data))]
