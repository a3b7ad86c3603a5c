"""Capture what one prefill forward already computes, on chosen layers only, and always clean up.

Hidden states: forward hooks on the chosen decoder layers keep a reference to their output (index l of
HF `hidden_states` is the output of decoder layer l-1; index 0 is the input of layer 0; the last index,
after the final norm, is the decoder's `last_hidden_state` and needs no hook).

Attention importance: the model keeps its own attention implementation (SDPA, flash, ...) for every
layer. Only the chosen layers' attention modules additionally recompute softmax(QKᵀ) from the very
q/k their attention function receives, in chunks of query positions, and keep only the attention each
token *receives* (summed over heads and queries) — never a [heads, T, T] tensor per layer. This works
for any model whose attention goes through transformers' `ALL_ATTENTION_FUNCTIONS` (Llama, Qwen2,
Mistral, Gemma, ... in transformers 5); we override that mapping locally for the duration only. Each query row can carry a weight in that sum (`begin(mask, query_weight)`): the
position correction of `features.attn_norm=lift` weights query i by the number of keys it sees.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import nn

from lengthpred.errors import ModelError


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder's list of transformer blocks (length config.num_hidden_layers)."""
    n = model.config.num_hidden_layers
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    layers = getattr(decoder, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers) == n:
        return layers
    for _, m in decoder.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) == n:
            return m
    raise ModelError(f"{type(model).__name__}: cannot find its {n} decoder layers for feature capture")


def attention_bias(mask: torch.Tensor, chunk: int) -> list[torch.Tensor]:
    """Additive causal + key-padding bias per chunk of query rows: [B, 1, 1, c, T] each, 0 or -inf.

    Padded query rows may see every earlier position (so no row is all -inf and softmax stays finite);
    they are then left out of the sum by weight 0.
    """
    real = mask.bool()
    t = mask.shape[1]
    pos = torch.arange(t, device=mask.device)
    out = []
    for s in range(0, t, chunk):
        e = min(t, s + chunk)
        causal = pos[None, :] <= pos[s:e, None]  # [c, T]
        allowed = causal[None] & (real[:, None, :] | ~real[:, s:e, None])  # [B, c, T]
        bias = torch.zeros(allowed.shape, dtype=torch.float32, device=mask.device)
        out.append(bias.masked_fill_(~allowed, float("-inf"))[:, None, None])
    return out


def received_attention(
    query: torch.Tensor,  # [B, H, T, hd] (after rotary)
    key: torch.Tensor,  # [B, Hkv, T, hd]
    mask: torch.Tensor,  # [B, T] 1 = real token
    scaling: float,
    chunk: int,
    bias: list[torch.Tensor] | None = None,  # attention_bias(mask, chunk), shared by all layers of a batch
    query_weight: torch.Tensor | None = None,  # [B, T] or [B, R, T] weights of the query rows; None: 1 per real query
    per_head: bool = False,
) -> torch.Tensor:
    """Attention each key position receives, summed over heads and real query positions (each weighted
    by `query_weight`): [B, T] float32, or [B, R, T] for R sets of query weights at once; `per_head` keeps
    the query heads apart: [B, H, T], or [B, R, H, T].

    Causal + key-padding mask (sliding windows and logit soft-capping are not applied).
    """
    b, h, t, hd = query.shape
    hkv = key.shape[1]
    bias = bias if bias is not None else attention_bias(mask, chunk)
    q = (query.float() * scaling).reshape(b, hkv, h // hkv, t, hd)  # grouped-query heads share a key head
    kt = key.float().transpose(-1, -2).unsqueeze(2)  # [B, Hkv, 1, hd, T]
    qw = mask.float()[:, None] if query_weight is None else query_weight.float().reshape(b, -1, t) * mask[:, None]
    r = qw.shape[1]
    out = torch.zeros((b, r, h, t) if per_head else (b, r, t), dtype=torch.float32, device=query.device)
    for k, s in enumerate(range(0, t, chunk)):
        e = min(t, s + chunk)
        scores = torch.matmul(q[:, :, :, s:e], kt)  # [B, Hkv, g, c, T]; query head i = kv head i // g
        probs = scores.add_(bias[k]).softmax(dim=-1)
        if per_head:  # Σ over real queries, head by head
            out.add_(torch.einsum("brc,bhct->brht", qw[:, :, s:e], probs.reshape(b, h, e - s, t)))
            continue
        rows = qw[:, :, None, s:e].expand(b, r, h, e - s).reshape(b, r, h * (e - s))  # real query rows
        out.baddbmm_(rows, probs.reshape(b, h * (e - s), t))  # Σ over heads and real queries
    return out if query_weight is not None and query_weight.dim() == 3 else out[:, 0]


class PrefillCapture:
    """Context manager: hooks on chosen layers for one model; `begin(mask)` before each forward.

    After a forward, `hidden[l]` is hidden_states index l (for l < num_layers) as [B, T, d] and
    `received` the attention received per token summed over the chosen attention layers [B, T] (or
    [B, R, T] for R query weightings); with `per_head`, `received_heads` also keeps every query head of every
    chosen layer apart, layer by layer: [B, L·H, T] (or [B, R, L·H, T]).
    """

    def __init__(self, model: nn.Module, hs_layers: list[int], attn_layers: list[int], attn_chunk: int = 128,
                 per_head: bool = False):
        self.model = model
        self.layers = decoder_layers(model)
        self.hs_layers = [i for i in hs_layers if i < len(self.layers)]  # the last one is the output
        self.attn_layers = list(attn_layers)
        self.attn_chunk = attn_chunk
        self.hidden: dict[int, torch.Tensor] = {}
        self.received: torch.Tensor | None = None
        self.per_head = per_head
        self._heads: list[torch.Tensor] = []
        self.n_attn_calls = 0
        self._mask: torch.Tensor | None = None
        self._query_weight: torch.Tensor | None = None
        self._bias: list[torch.Tensor] | None = None
        self._handles: list = []
        self._attn_ids: set[int] = set()
        self._restore: list[tuple[object, str, object]] = []

    def begin(self, mask: torch.Tensor, query_weight: torch.Tensor | None = None) -> None:
        self._mask = mask
        self._query_weight = query_weight
        self._bias = None
        self.hidden = {}
        self.received = None
        self._heads = []
        self.n_attn_calls = 0

    @property
    def received_heads(self) -> torch.Tensor | None:
        """[B, L·H, T] (or [B, R, L·H, T]): every query head of every chosen layer, in layer order."""
        return torch.cat(self._heads, dim=-2) if self._heads else None

    # -- hooks ---------------------------------------------------------------------------------
    def _here(self, t: torch.Tensor) -> torch.Tensor:
        """`t` on the inputs' device: a layer on another GPU (a device map) hands its states back there."""
        return t if self._mask is None or t.device == self._mask.device else t.to(self._mask.device)

    def _keep(self, index: int) -> Callable:
        def hook(_module, _args, output):
            self.hidden[index] = self._here(output[0] if isinstance(output, tuple) else output)

        return hook

    def _keep_input(self, _module, args, kwargs):
        self.hidden[0] = self._here(args[0] if args else kwargs["hidden_states"])

    def _wrap_attention(self, fn: Callable) -> Callable:
        def attention(module, query, key, value, attention_mask, *args, **kwargs):
            out = fn(module, query, key, value, attention_mask, *args, **kwargs)
            if id(module) in self._attn_ids and self._mask is not None:
                scaling = kwargs.get("scaling") or getattr(module, "scaling", None) or query.shape[-1] ** -0.5
                with torch.no_grad():
                    mask, weight = self._mask.to(query.device), self._query_weight  # the layer's GPU
                    if weight is not None:
                        weight = weight.to(query.device)
                    if self._bias is None or self._bias[0].device != query.device:
                        self._bias = attention_bias(mask, self.attn_chunk)
                    r = self._here(received_attention(query, key, mask, float(scaling), self.attn_chunk, self._bias,
                                                      weight, per_head=self.per_head))
                if self.per_head:  # layers arrive in forward order: heads of layer l before those of l + 1
                    self._heads.append(r)
                    r = r.sum(dim=-2)
                self.received = r if self.received is None else self.received + r
                self.n_attn_calls += 1
            return out

        return attention

    def __enter__(self) -> PrefillCapture:
        try:
            for idx in self.hs_layers:
                if idx == 0:
                    h = self.layers[0].register_forward_pre_hook(self._keep_input, with_kwargs=True)
                else:
                    h = self.layers[idx - 1].register_forward_hook(self._keep(idx))
                self._handles.append(h)
            if self.attn_layers:
                self._attn_ids = {id(m) for i in self.attn_layers for m in self.layers[i].modules()}
                self._patch_attention()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _patch_attention(self) -> None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        impl = getattr(self.model.config, "_attn_implementation", None) or "eager"
        if impl == "eager" or impl not in ALL_ATTENTION_FUNCTIONS:
            # eager is looked up with each modeling file's own default function
            attn_module = next(m for i in self.attn_layers for m in self.layers[i].modules()
                               if hasattr(m, "layer_idx") and m is not self.layers[i])
            original = getattr(sys.modules[type(attn_module).__module__], "eager_attention_forward", None)
            if original is None:
                raise ModelError(f"{type(self.model).__name__}: attention importance needs its attention "
                                 f"to go through transformers' AttentionInterface; set features.attn_layers=[]")
        else:
            original = ALL_ATTENTION_FUNCTIONS[impl]
        had_local = impl in ALL_ATTENTION_FUNCTIONS._local_mapping
        self._restore.append((impl, had_local, ALL_ATTENTION_FUNCTIONS._local_mapping.get(impl)))
        ALL_ATTENTION_FUNCTIONS[impl] = self._wrap_attention(original)

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._restore:
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

            for impl, had_local, previous in self._restore:
                if had_local:
                    ALL_ATTENTION_FUNCTIONS[impl] = previous
                else:
                    del ALL_ATTENTION_FUNCTIONS[impl]
            self._restore.clear()
        self._mask = None
        self._query_weight = None
        self._bias = None
        self.hidden = {}
        self.received = None
        self._heads = []
