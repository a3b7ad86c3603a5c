"""Per-token weights (last, mean, EGTP entropy, attention importance, ESTP fusions) and weighted pooling.

All functions take a [B, T] mask (1 = real prompt token) and give padded positions weight exactly 0,
so left and right padding pool the same tokens.
"""

from __future__ import annotations

import torch

from lengthpred.features.settings import _FUSED


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last real token per row: -1 under left padding, found from the mask in general."""
    t = mask.shape[1]
    pos = torch.arange(t, device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), pos, -1).max(dim=1).values  # [B]


@torch.no_grad()
def token_entropy(
    final_hidden: torch.Tensor,  # [B, T, d] after the final norm
    mask: torch.Tensor,  # [B, T]
    weight: torch.Tensor,  # [V, d] LM-head weight, in the dtype the logits are computed in
    bias: torch.Tensor | None = None,
    chunk: int = 256,
    softcap: float | None = None,
) -> torch.Tensor:
    """Next-token entropy (nats) at each real prompt position, 0 at padding: [B, T] float32.

    Only real positions go through the LM head, `chunk` tokens at a time into buffers reused across
    chunks (fresh 50 MB tensors per chunk cost as much as the maths on CPU), so no [B, T, vocab]
    tensor ever exists. H = log Z - Σ e·l / Z with l shifted by its row max and e = exp(l).
    """
    real = mask.bool()
    flat = final_hidden[real].to(weight.dtype)  # [N, d]
    n, v = flat.shape[0], weight.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=final_hidden.device)
    c = min(chunk, max(n, 1))
    logits = torch.empty(c, v, dtype=torch.float32, device=flat.device)
    expd = torch.empty_like(logits)
    low = torch.empty(c, v, dtype=weight.dtype, device=flat.device) if weight.dtype != torch.float32 else None
    wt = weight.t()
    for s in range(0, n, c):
        k = min(c, n - s)
        lg, ex = logits[:k], expd[:k]
        if low is None:
            torch.matmul(flat[s : s + k], wt, out=lg)
        else:
            lg.copy_(torch.matmul(flat[s : s + k], wt, out=low[:k]))
        if bias is not None:
            lg.add_(bias.float())
        if softcap:
            lg.div_(softcap).tanh_().mul_(softcap)
        lg.sub_(lg.amax(dim=-1, keepdim=True))
        torch.exp(lg, out=ex)
        z = ex.sum(dim=-1)
        out[s : s + k] = z.log() - torch.bmm(ex.unsqueeze(1), lg.unsqueeze(2)).view(k) / z
    ent = torch.zeros(mask.shape, dtype=torch.float32, device=final_hidden.device)
    ent[real] = out
    return ent


def _masked_softmax(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return x.masked_fill(~real, float("-inf")).softmax(dim=-1)


def _zscore(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    n = real.sum(dim=-1, keepdim=True).clamp(min=1)
    mean = (x * real).sum(dim=-1, keepdim=True) / n
    var = (((x - mean) * real) ** 2).sum(dim=-1, keepdim=True) / n
    return (x - mean) / (var.sqrt() + 1e-6) * real


def pool_weights(
    mask: torch.Tensor,  # [B, T]
    pools: tuple[str, ...],
    fused: tuple[str, ...] = (),
    entropy: torch.Tensor | None = None,  # [B, T]
    received: torch.Tensor | None = None,  # [B, T] attention received (any positive scale)
) -> dict[str, torch.Tensor]:
    """Pool name → weights [B, T] float32 that sum to 1 over each row's real tokens."""
    real = mask.bool()
    n = real.sum(dim=-1, keepdim=True).float()
    w: dict[str, torch.Tensor] = {}
    attn = None
    if received is not None:
        r = received.float() * real
        attn = r / r.sum(dim=-1, keepdim=True).clamp(min=1e-30)
    for p in pools:
        if p == "last":
            onehot = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
            onehot[torch.arange(mask.shape[0]), last_index(mask)] = 1.0
            w[p] = onehot
        elif p == "mean":
            w[p] = real.float() / n
        elif p == "entropy":
            w[p] = _masked_softmax(entropy, real)
        elif p == "attn":
            w[p] = attn
    for f in fused:
        m = _FUSED.match(f)
        if m.group("alpha") is not None:
            a = float(m.group("alpha"))
            w[f"fused_{f}"] = _masked_softmax(a * _zscore(entropy, real) + (1 - a) * _zscore(attn, real), real)
        else:
            prod = _masked_softmax(entropy, real) * attn
            w[f"fused_{f}"] = prod / prod.sum(dim=-1, keepdim=True).clamp(min=1e-30)
    return w


def pool(hidden: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ_t w[b, k, t] h[b, t] for every pool k at once: [B, T, d] × [B, K, T] → [B, K, d] float32."""
    h = hidden.masked_fill(~mask.bool()[..., None], 0.0)  # padded rows may hold NaN under some kernels
    return torch.bmm(weights.to(h.dtype), h).float()
