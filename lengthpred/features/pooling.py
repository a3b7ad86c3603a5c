"""Per-token weights (last, mean, EGTP entropy, attention importance, ESTP fusions) and weighted pooling.

All functions take a [B, T] mask (1 = real prompt token) and give padded positions weight exactly 0,
so left and right padding pool the same tokens; the pools other than `last` range over a `span` of the
real tokens (the messages' content under `features.span=content`).
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


def _rank_z(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """z-scored ranks over each row's `real` positions (ties in position order): within ±√3."""
    rank = x.float().masked_fill(~real, float("inf")).argsort(dim=-1, stable=True).argsort(dim=-1)
    return _zscore(rank.float(), real)


def query_weights(mask: torch.Tensor, attn_norm: str) -> torch.Tensor:
    """Weight of each query row in the received-attention sum [B, T]: 1 per real query, and under
    `lift` the number of real keys the query sees, so that a query attending uniformly gives 1 to each."""
    m = mask.float()
    return m * m.cumsum(dim=-1) if attn_norm == "lift" else m


def attention_importance(received: torch.Tensor, mask: torch.Tensor, attn_norm: str) -> torch.Tensor:
    """Importance score per token [B, T] (0 at padding) from the received attention (summed with
    `query_weights(mask, attn_norm)`): `sum` keeps the raw sum; `per_query` and `lift` divide by the
    number of real queries that can see each token (it and every real token after it), which removes
    the head start causal masking gives early tokens."""
    shape = (mask.shape[0],) + (1,) * (received.dim() - 2) + (mask.shape[1],)  # [B, T] or per head [B, H, T]
    real = mask.bool().view(shape)
    r = received.float() * real
    if attn_norm == "sum":
        return r
    seen_by = mask.float().flip(-1).cumsum(dim=-1).flip(-1)  # [B, T] real queries at or after each position
    return r / seen_by.clamp(min=1).view(shape)


def head_pools(importance: torch.Tensor, hidden: torch.Tensor, span: torch.Tensor,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per attention head: the state pooled by that head's importance alone over the span, [B, H, d] float32,
    and the head's share of the summed importance mass, [B, H] (sums to 1 per row). Storing the normalised
    pool (a convex combination of states) rather than the raw weighted sum keeps float16 storage in range
    (a sink token can take importance ~T). Any set S of heads then pools as Σ_S share·state / Σ_S share."""
    a = importance.float() * span.float()[:, None]  # [B, H, T]
    mass = a.sum(dim=-1)  # [B, H]
    h = hidden.float().masked_fill(~span.bool()[..., None], 0.0)
    pooled = torch.bmm(a / mass.clamp(min=1e-30)[..., None], h)  # [B, H, d]
    return pooled, mass / mass.sum(dim=-1, keepdim=True).clamp(min=1e-30)


def fusion_scores(entropy: torch.Tensor, importance: torch.Tensor, span: torch.Tensor,
                  fuse_on: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two per-token scores a fused pool mixes, standardised over each row's `span` (0 outside):
    `z`: z(H), z(A); `log`: z(H), z(log A) (A is a product of attention shares: its outliers are
    multiplicative); `rank`: z-scored ranks of H and A."""
    span = span.bool()
    if fuse_on == "rank":
        return _rank_z(entropy, span), _rank_z(importance, span)
    a = importance.float()
    if fuse_on == "log":
        mean = (a * span).sum(dim=-1, keepdim=True) / span.sum(dim=-1, keepdim=True).clamp(min=1)
        a = (a / mean.clamp(min=1e-30)).clamp(min=1e-6).log()  # finite everywhere; 0 attention is an outlier, not -inf
    return _zscore(entropy.float(), span), _zscore(a, span)


def pool_span(mask: torch.Tensor, span: torch.Tensor | None) -> torch.Tensor:
    """The real tokens of `span` [B, T] bool; a row with none (None: every row) takes all its real tokens."""
    real = mask.bool()
    if span is None:
        return real
    span = span.bool() & real
    return torch.where(span.any(dim=-1, keepdim=True), span, real)


def pool_weights(
    mask: torch.Tensor,  # [B, T]
    pools: tuple[str, ...],
    fused: tuple[str, ...] = (),
    entropy: torch.Tensor | None = None,  # [B, T]
    importance: torch.Tensor | None = None,  # [B, T] attention importance (any positive scale)
    *,
    span: torch.Tensor | None = None,  # [B, T] tokens to pool over (a subset of mask); None: every real token
    fuse_on: str = "log",
) -> dict[str, torch.Tensor]:
    """Pool name → weights [B, T] float32 that sum to 1 over each row's span tokens (`last`: the last
    real token, whatever the span). A row whose span is empty pools over all its real tokens."""
    span = pool_span(mask, span)
    n = span.sum(dim=-1, keepdim=True).float()
    w: dict[str, torch.Tensor] = {}
    attn = None
    if importance is not None:
        r = importance.float() * span
        attn = r / r.sum(dim=-1, keepdim=True).clamp(min=1e-30)
    for p in pools:
        if p == "last":
            onehot = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
            onehot[torch.arange(mask.shape[0]), last_index(mask)] = 1.0
            w[p] = onehot
        elif p == "mean":
            w[p] = span.float() / n
        elif p == "entropy":
            w[p] = _masked_softmax(entropy, span)
        elif p == "attn":
            w[p] = attn
    scores = None
    for f in fused:
        m = _FUSED.match(f)
        if m.group("alpha") is not None:
            a = float(m.group("alpha"))
            if scores is None:
                scores = fusion_scores(entropy, attn, span, fuse_on)
            w[f"fused_{f}"] = _masked_softmax(a * scores[0] + (1 - a) * scores[1], span)
        else:
            prod = _masked_softmax(entropy, span) * attn
            w[f"fused_{f}"] = prod / prod.sum(dim=-1, keepdim=True).clamp(min=1e-30)
    return w


def pool(hidden: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ_t w[b, k, t] h[b, t] for every pool k at once: [B, T, d] × [B, K, T] → [B, K, d] float32."""
    h = hidden.masked_fill(~mask.bool()[..., None], 0.0)  # padded rows may hold NaN under some kernels
    return torch.bmm(weights.to(h.dtype), h).float()
