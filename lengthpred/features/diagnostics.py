"""Where the pools put their weight: the share on chat-template tokens, the top-1 mass, the weights' entropy.

AUDIT.md asks for these before any pooling is trusted: a pool that puts most of its weight on the template
tokens every prompt shares pools a constant, and a softmax over z-scores can give one token all the weight.
`pool_weight_stats` runs the extraction's own forward and weighting on a few prompts, without storing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from lengthpred.features.capture import PrefillCapture
from lengthpred.features.extract import Plan, collate, collate_span, encode, prefill_scores, prompt_records
from lengthpred.features.pooling import pool_span, pool_weights
from lengthpred.features.settings import FeatureSettings
from lengthpred.features.span import encode_with_span


@torch.no_grad()
def pool_weight_stats(variants: FeatureSettings | Mapping[str, FeatureSettings], model: nn.Module, tokenizer: Any,
                      prompts: Any) -> pd.DataFrame:
    """One row per (variant, prompt, pool except `last`): `template_share` (weight on tokens outside the
    messages' user/assistant content, whatever the variant's span), `top1` (largest weight),
    `entropy_ratio` (entropy of the weights / log of the number of span tokens: 1 = uniform) and
    `n_tokens`. Variants (settings differing only in how they pool) share one forward per batch."""
    variants = {"": variants} if isinstance(variants, FeatureSettings) else dict(variants)
    first = next(iter(variants.values()))
    norms = tuple(dict.fromkeys(v.attn_norm for v in variants.values()))
    # one forward for all: every pool and fusion any variant asks for, no stored layer
    settings = dataclasses.replace(first, layers=(-1,), token_layers=(), pools=("entropy", "attn"), fused=())
    plan = Plan(settings, model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows = []
    records = prompt_records(prompts)
    with PrefillCapture(model, plan.hs_layers, plan.attn_layers, settings.attn_chunk) as capture:
        for s in range(0, len(records), settings.batch_size):
            batch = records[s : s + settings.batch_size]
            limit = dict(max_prompt_tokens=settings.max_prompt_tokens, overflow=settings.overflow)
            content = [encode_with_span(tokenizer, m, **limit, prompt_id=pid) for pid, m in batch]
            ids, mask = collate([c[0] for c in content], pad_id, settings.padding_side)
            template = ~collate_span([c[1] for c in content], settings.padding_side) & mask.bool()
            _, entropy, importance = prefill_scores(model, plan, capture, ids, mask, norms)
            for name, v in variants.items():
                enc = [encode(tokenizer, m, v, v.max_prompt_tokens, pid) for pid, m in batch]
                span = pool_span(mask, collate_span([e[1] for e in enc], settings.padding_side))
                w = pool_weights(mask, v.pools, v.fused, entropy=entropy, importance=importance[v.attn_norm],
                                 span=span, fuse_on=v.fuse_on)
                rows += _rows(name, [pid for pid, _ in batch], w, template, span)
    return pd.DataFrame(rows)


def _rows(variant: str, ids: list[str], w: dict[str, torch.Tensor], template: torch.Tensor,
          span: torch.Tensor) -> list[dict]:
    out = []
    for b, pid in enumerate(ids):
        n = int(span[b].sum())
        for p, wp in w.items():
            if p == "last":
                continue
            wb = wp[b].double()
            nz = wb[wb > 0]
            out.append({
                "variant": variant, "id": pid, "pool": p, "template_share": float(wb[template[b]].sum()),
                "top1": float(wb.max()), "n_tokens": n,
                "entropy_ratio": float(-(nz * nz.log()).sum() / math.log(n)) if n > 1 else 1.0,
            })
    return out


def summarise(stats: pd.DataFrame, statistic: str = "template_share") -> pd.DataFrame:
    """Median of one statistic: a row per pool, a column per variant (both in first-seen order)."""
    out = stats.pivot_table(index="pool", columns="variant", values=statistic, aggfunc="median", sort=False)
    return out.loc[list(dict.fromkeys(stats["pool"])), list(dict.fromkeys(stats["variant"]))]


def template_fraction(tokenizer: Any, prompts: Any) -> np.ndarray:
    """Per prompt, the share of its tokens that are template (outside the messages' content)."""
    out = []
    for pid, messages in prompt_records(prompts):
        _, inside = encode_with_span(tokenizer, messages, prompt_id=pid)
        out.append(1 - sum(inside) / len(inside))
    return np.array(out)
