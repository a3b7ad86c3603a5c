"""ESTP with a learned fusion: the EGTP soft-label bin head on token states pooled by weights it learns.

Per prompt the input is one layer's token-level states h_t with each token's next-token entropy H_t and
attention received A_t (`FeatureSet.token_inputs`: X is a sequence of [t_i, d + 2] arrays). The pooling
weights are RESEARCH.md's convex mix with its mixing weight learned instead of fixed:

    w_t = softmax_t( β · (α s(H)_t + (1 − α) s(A)_t) ),   α = sigmoid(θ),  β = exp(τ)

s is the score the stored fused pools mix (`fuse_on`, as `features.fuse_on`: z(H) and z(log A) by
default) over the prompt's tokens as stored (`features.span`), so α = 0.5, β = 1 is exactly the stored
`fused_mix0.5` pool. θ and τ are trained jointly with the MLP (their own learning rate, `fusion_lr`,
since the MLP's 2e-5 would leave them where they start); `learn_temperature=False` keeps β = 1.

The MLP reads the pooled vector standardised by a running mean and scale (`scale_momentum` per training
batch, from the initial pooling's statistics). Standardised once, at α = 0.5 and β = 1 (`scale_momentum=0`,
this head's first version), the input drifts as α and β move: by the same offset for every prompt, in
units of the initial spread, which is tiny when the initial pooling sits on tokens every prompt shares
(the demo's template block), so the MLP sees nearly one input, and a sharper pooling is not learnable.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from torch import nn

from lengthpred.features.pooling import fusion_scores
from lengthpred.features.settings import FUSE_ON
from lengthpred.heads.base import HEADS, HeadInputError, check_targets
from lengthpred.heads.binned import BinnedMLPHead, build_mlp, torch_threads

N_SCALARS = 2  # entropy, attention received: the last columns of every token row


class FusionPoolMLP(nn.Module):
    """Learned-weight pooling of token states followed by the binned MLP."""

    def __init__(self, d: int, hidden: int, k: int, *, layer_norm: bool, dropout: float, alpha: float,
                 temperature: float, learn_temperature: bool, scale_momentum: float = 0.0) -> None:
        super().__init__()
        self.scale_momentum = scale_momentum
        a = min(max(alpha, 1e-4), 1 - 1e-4)
        self.theta = nn.Parameter(torch.tensor(math.log(a / (1 - a)), dtype=torch.float32))
        self.log_temp = nn.Parameter(torch.tensor(math.log(temperature), dtype=torch.float32),
                                     requires_grad=learn_temperature)
        self.register_buffer("x_mean", torch.zeros(d))
        self.register_buffer("x_scale", torch.ones(d))
        self.mlp = build_mlp(d, hidden, k, layer_norm=layer_norm, dropout=dropout)

    @property
    def alpha(self) -> torch.Tensor:
        return torch.sigmoid(self.theta)

    def pool(self, h: torch.Tensor, zh: torch.Tensor, za: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """[b, T, d] states, [b, T] z-scores and mask → [b, d] pooled states."""
        a = self.alpha
        score = self.log_temp.exp() * (a * zh + (1 - a) * za)
        w = score.masked_fill(~real, float("-inf")).softmax(dim=1)
        return torch.bmm(w.unsqueeze(1), h).squeeze(1)

    def forward(self, h: torch.Tensor, zh: torch.Tensor, za: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(h, zh, za, real)  # [b, d]
        if self.training and self.scale_momentum > 0:
            self.track(pooled.detach())
        return self.mlp((pooled - self.x_mean) / self.x_scale)

    @torch.no_grad()
    def track(self, pooled: torch.Tensor) -> None:
        """Move the running mean and scale towards this batch's (the spread about the updated mean, so
        a drift of the mean between batches counts as spread, not as a constant input offset)."""
        m = self.scale_momentum
        self.x_mean.lerp_(pooled.mean(dim=0), m)
        var = ((pooled - self.x_mean) ** 2).mean(dim=0)
        self.x_scale.copy_(self.x_scale.square().lerp(var, m).sqrt().clamp(min=1e-6))


class _Tokens:
    """A validated token-level X: per-prompt state tensors and per-prompt entropy / attention scores."""

    def __init__(self, X: Any, d: int | None = None, fuse_on: str = "log") -> None:
        if isinstance(X, np.ndarray) and X.dtype != object and X.ndim == 2:
            raise HeadInputError("X must be a sequence of [t_i, d + 2] token arrays (states ‖ entropy ‖ "
                                 "attention), one per prompt; got a 2-D array (pooled features?)")
        rows = list(X)
        if not rows:
            raise HeadInputError("X has no prompts")
        self.h, self.zh, self.za = [], [], []
        for i, r in enumerate(rows):
            r = np.asarray(r, dtype=np.float32)
            if r.ndim != 2 or r.shape[0] < 1 or r.shape[1] <= N_SCALARS:
                raise HeadInputError(f"prompt {i}: expected [t >= 1, d + {N_SCALARS}] token rows, got {r.shape}")
            if d is not None and r.shape[1] - N_SCALARS != d:
                raise HeadInputError(f"prompt {i}: X has {r.shape[1] - N_SCALARS} features, but this head "
                                     f"is expecting {d} features as input")
            if not np.isfinite(r).all():
                raise HeadInputError(f"prompt {i}: token inputs contain NaN or inf")
            t = torch.from_numpy(r)
            self.h.append(t[:, :-N_SCALARS])
            zh, za = fusion_scores(t[None, :, -2], t[None, :, -1], torch.ones(1, len(t), dtype=torch.bool), fuse_on)
            self.zh.append(zh[0])
            self.za.append(za[0])
        self.d = rows[0].shape[1] - N_SCALARS if d is None else d
        widths = {x.shape[1] for x in self.h}
        if len(widths) > 1:
            raise HeadInputError(f"prompts have different state widths {sorted(widths)}")

    def __len__(self) -> int:
        return len(self.h)

    def take(self, idx: Sequence[int]) -> _Tokens:
        """The prompts `idx`, sharing this set's tensors."""
        out = copy.copy(self)
        out.h, out.zh, out.za = ([v[i] for i in idx] for v in (self.h, self.zh, self.za))
        return out

    def batch(self, idx: Sequence[int]) -> tuple[torch.Tensor, ...]:
        """Right-padded [b, T, d] states, [b, T] z-scores and the [b, T] real-token mask."""
        t = max(len(self.h[i]) for i in idx)
        h = torch.zeros(len(idx), t, self.d)
        zh, za = torch.zeros(len(idx), t), torch.zeros(len(idx), t)
        real = torch.zeros(len(idx), t, dtype=torch.bool)
        for b, i in enumerate(idx):
            n = len(self.h[i])
            h[b, :n], zh[b, :n], za[b, :n], real[b, :n] = self.h[i], self.zh[i], self.za[i], True
        return h, zh, za, real


@HEADS.register("estp_learned")
class ESTPLearnedHead(BinnedMLPHead):
    """ESTP's soft-label bin head on token states pooled by a learned entropy/attention mixing weight α.

    Learned attributes beyond the binned heads': `alpha_` and `temperature_` (the fusion as fitted).
    """

    name = "estp_learned"
    input_kind = "tokens"
    _parameter_constraints: dict = {
        **BinnedMLPHead._parameter_constraints,
        "alpha_init": [Interval(Real, 0, 1, closed="neither")],
        "temperature_init": [Interval(Real, 0, None, closed="neither")],
        "learn_temperature": ["boolean"],
        "fusion_lr": [Interval(Real, 0, None, closed="left")],
        "fuse_on": [StrOptions(set(FUSE_ON))],
        "scale_momentum": [Interval(Real, 0, 1, closed="both")],
        "eval_batch_size": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        *,
        hidden: int | None = None,
        n_bins: int = 20,
        layer_norm: bool = True,
        dropout: float = 0.1,
        soft_labels: bool = True,
        ce_weight: float = 0.95,
        mse_weight: float = 0.05,
        lr: float = 2e-5,
        weight_decay: float = 0.01,
        epochs: int = 10,
        batch_size: int = 16,
        max_length: float | None = None,
        binning: str = "quantile",
        within_bin: str = "uniform",
        decode: str = "expected",
        random_state: int = 0,
        n_threads: int = 1,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        alpha_init: float = 0.5,
        temperature_init: float = 1.0,
        learn_temperature: bool = True,
        fusion_lr: float = 0.05,
        fuse_on: str = "log",
        scale_momentum: float = 0.1,
        eval_batch_size: int = 32,
    ) -> None:
        super().__init__(hidden=hidden, n_bins=n_bins, layer_norm=layer_norm, dropout=dropout,
                         soft_labels=soft_labels, ce_weight=ce_weight, mse_weight=mse_weight, lr=lr,
                         weight_decay=weight_decay, epochs=epochs, batch_size=batch_size, max_length=max_length,
                         binning=binning, within_bin=within_bin, decode=decode, random_state=random_state,
                         n_threads=n_threads,
                         early_stopping=early_stopping, validation_fraction=validation_fraction,
                         n_iter_no_change=n_iter_no_change)
        self.alpha_init = alpha_init
        self.temperature_init = temperature_init
        self.learn_temperature = learn_temperature
        self.fusion_lr = fusion_lr
        self.fuse_on = fuse_on
        self.scale_momentum = scale_momentum
        self.eval_batch_size = eval_batch_size

    # -- fitting -----------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> ESTPLearnedHead:
        self._validate_params()
        full = _Tokens(X, fuse_on=self.fuse_on)
        y = check_targets(y, len(full))
        fit_rows, held = self._held_out_rows(len(full))
        data, yf = full.take(fit_rows), y[fit_rows]
        self.n_features_in_ = data.d
        self._init_tokens(data, yf)
        with torch_threads(self.n_threads):
            self._run_epochs(lambda: self._token_epoch(data, yf), None if held is None else (full.take(held), y[held]))
        return self

    def _restored(self) -> None:
        self.x_mean_ = self.module_.x_mean.numpy().copy()
        self.x_scale_ = self.module_.x_scale.numpy().copy()

    def partial_fit(self, X: Any, y: Any) -> ESTPLearnedHead:
        first = not hasattr(self, "module_")
        if first:
            self._validate_params()
        data = _Tokens(X, None if first else self.n_features_in_, self.fuse_on)
        y = check_targets(y, len(data))
        if first:
            self.n_features_in_ = data.d
            self._init_tokens(data, y)
        with torch_threads(self.n_threads):
            self._token_epoch(data, y)
        return self

    def _init_tokens(self, data: _Tokens, y: np.ndarray) -> None:
        # bins, seed, module and optimizer as the binned heads; x_mean_/x_scale_ from the initial pooling
        self._init_state(np.zeros((1, data.d), dtype=np.float32), y)
        with torch.no_grad(), torch_threads(self.n_threads):
            pooled = torch.cat([self.module_.pool(*data.batch(idx))
                                for idx in _chunks(range(len(data)), self.eval_batch_size)])
        std = pooled.std(dim=0, unbiased=False)
        self.x_mean_ = pooled.mean(dim=0).numpy().astype(np.float32)
        self.x_scale_ = torch.where(std > 1e-6, std, torch.ones_like(std)).numpy().astype(np.float32)
        self._sync_buffers()

    def _sync_buffers(self) -> None:
        self.module_.x_mean.copy_(torch.from_numpy(self.x_mean_))
        self.module_.x_scale.copy_(torch.from_numpy(self.x_scale_))

    def _build(self, d: int) -> FusionPoolMLP:
        hidden = self.hidden if self.hidden is not None else max(d // 2, 1)
        return FusionPoolMLP(d, hidden, self.n_bins, layer_norm=self.layer_norm, dropout=self.dropout,
                             alpha=self.alpha_init, temperature=self.temperature_init,
                             learn_temperature=self.learn_temperature, scale_momentum=self.scale_momentum)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        fusion = [self.module_.theta, self.module_.log_temp]
        return torch.optim.AdamW([
            {"params": self.module_.mlp.parameters(), "lr": self.lr, "weight_decay": self.weight_decay},
            {"params": fusion, "lr": self.fusion_lr, "weight_decay": 0.0},
        ])

    def _token_epoch(self, data: _Tokens, y: np.ndarray) -> None:
        self._train_epoch(len(data), y, lambda b: self.module_(*data.batch(b.tolist())))
        # the running standardisation as trained is part of the fitted state (saved with the head)
        self.x_mean_ = self.module_.x_mean.numpy().copy()
        self.x_scale_ = self.module_.x_scale.numpy().copy()

    # -- prediction --------------------------------------------------------------------------------
    def predict_bins(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        data = X if isinstance(X, _Tokens) else _Tokens(X, self.n_features_in_, self.fuse_on)
        self.module_.eval()
        with torch_threads(self.n_threads), torch.no_grad():
            logits = torch.cat([self.module_(*data.batch(idx))
                                for idx in _chunks(range(len(data)), self.eval_batch_size)])
        return torch.softmax(logits, dim=1).double().numpy()

    @property
    def alpha_(self) -> float:
        check_is_fitted(self)
        return float(self.module_.alpha.detach())

    @property
    def temperature_(self) -> float:
        check_is_fitted(self)
        return float(self.module_.log_temp.detach().exp())

    # -- persistence: the binned heads' (module_ includes θ, τ and the buffers); α, β also in the json ----
    def _state(self):
        arrays, meta = super()._state()
        return arrays, meta | {"alpha": self.alpha_, "temperature": self.temperature_, "fuse_on": self.fuse_on}

    def _set_state(self, arrays, meta, path):
        if "fuse_on" not in meta:  # saved before the option: it fused z(H) and z(A)
            self.fuse_on = "z"
        super()._set_state(arrays, meta, path)


def _chunks(seq: Sequence[int] | range, n: int) -> list[list[int]]:
    seq = list(seq)
    return [seq[i : i + n] for i in range(0, len(seq), n)]
