"""A decoder's layers run in ranges: the states entering layer `lo`, through layers lo..hi−1, out (HF layout).

`hidden_states[L]` of a transformers decoder (0 = the embeddings) is what leaves decoder layer L−1, before the
final norm, except for the last index (L = number of layers), which HF returns after the norm. `states(model,
ids, mask, 0, L)` reproduces `hidden_states[L]` of the full forward, and `states(model, ids, mask, 0, s)` then
`run_layers(model, h, mask, s, L)` gives the same in two parts: a head that adapts only layers s..L−1 runs the
frozen part once per prompt and trains on the rest (lengthpred.heads.lora). Right padding only (positions
count from each row's first token); the decoder is the inner model of a causal LM (`embed_tokens`, `layers`,
`norm`, `rotary_emb`: Llama, Qwen2, Mistral, SmolLM2).
"""

from __future__ import annotations

import torch
from torch import nn


def decoder_of(model: nn.Module) -> nn.Module:
    """The inner decoder of a causal LM (`model.model`), or the decoder itself."""
    inner = getattr(model, "model", model)
    for part in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(inner, part):
            raise TypeError(f"{type(inner).__name__} has no `{part}`: not an HF decoder this module can run in parts")
    return inner


def run_layers(decoder: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """[b, t, d] states entering layer `lo` → [b, t, d] `hidden_states[hi]` (after the final norm only where
    `hi` is the number of layers, as HF returns it). `mask` [b, t]: 1 for real tokens, right-padded."""
    from transformers.masking_utils import create_causal_mask

    n = len(decoder.layers)
    if not 0 <= lo <= hi <= n:
        raise ValueError(f"layers {lo}..{hi}: the decoder has {n}")
    position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)  # [1, t]
    causal = create_causal_mask(config=decoder.config, inputs_embeds=hidden, attention_mask=mask,
                                past_key_values=None, position_ids=position_ids)
    rope = decoder.rotary_emb(hidden, position_ids=position_ids)
    for layer in decoder.layers[lo:hi]:
        hidden = layer(hidden, attention_mask=causal, position_embeddings=rope, position_ids=position_ids,
                       past_key_values=None, use_cache=False)
    return decoder.norm(hidden) if hi == n and hi > lo else hidden


def states(decoder: nn.Module, ids: torch.Tensor, mask: torch.Tensor, lo: int, hi: int,
           hidden: torch.Tensor | None = None) -> torch.Tensor:
    """`hidden_states[hi]` from token ids (lo = 0) or from the states entering layer `lo` (`hidden`)."""
    if hidden is None:
        if lo != 0:
            raise ValueError("states from token ids start at layer 0")
        hidden = decoder.embed_tokens(ids)  # [b, t, d]
    return run_layers(decoder, hidden, mask, lo, hi)


def last_real(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[b, t, d], right-padded [b, t] → [b, d]: each row's last real token."""
    last = mask.long().sum(dim=1).clamp(min=1) - 1  # [b]
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def right_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists → ([b, t] ids, [b, t] mask), right-padded to the longest."""
    t = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), t), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(rows), t), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def pad_states(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-prompt [t_i, d] states → ([b, t, d] right-padded with zeros, [b, t] mask)."""
    t = max((r.shape[0] for r in rows), default=0)
    d = rows[0].shape[1] if rows else 0
    out = rows[0].new_zeros((len(rows), t, d)) if rows else torch.zeros((0, 0, 0))
    mask = torch.zeros((len(rows), t), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
        mask[i, : r.shape[0]] = 1
    return out, mask
