"""Binned MLP heads on pooled prefill features: EGTP/ESTP (soft-label 20-bin head) and TRAIL's probe.

Bins (`binning`, fitted on the training targets in `fit`):
- "quantile" (the default): edges at the training quantiles of y, so every bin holds about the same
  share of prompts whatever the tail; each bin's centre c_j is the mean training length inside it.
- "uniform": `n_bins` equal-width bins, centres at their midpoints (TRAIL's 10 bins over 0–512, EGTP's).
  On long-tailed lengths (p90 ≪ max) most prompts land in the first bin and the head cannot rank.
Both span [0, max_length] (max_length=None: the training maximum); a longer target counts in the last
bin. The MLP outputs bin logits; the prediction is Σ p̂_j c_j (`decode="expected"`) or the centre of the
most likely bin (`decode="argmax"`). The predicted distribution (and its median) spreads each bin's probability
uniformly over the bin (`within_bin="uniform"`) or like the training lengths in that bin (`"training"`:
lengthpred.distributions.within_bin_knots), which matters where a quantile bin reaches a long tail's maximum;
`"validation"` takes whichever of the two gives the lower MAE of the median on the validation split
(`tune_on_validation`, `within_bin_`; uniform until tuned).

Loss: ce_weight · CE(soft labels) + mse_weight · MSE(Σ p̂_j c_j / max_length, y / max_length). Soft labels
are p_j ∝ exp(−|j − bin(y)|) over bin indices (ForeLen); `soft_labels=False` gives one-hot labels (TRAIL).
The MSE term is on lengths divided by max_length so that its weight means the same at any length scale.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn

from lengthpred.distributions import Histogram, within_bin_knots
from lengthpred.heads.base import HEADS, BaseHead, HeadInputError, Points, check_targets
from lengthpred.metrics import spearman_or_nan

log = logging.getLogger(__name__)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with `n` intra-op threads and restore the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


BINNINGS = ("quantile", "uniform")
WITHIN_BIN = ("uniform", "training", "validation")


def bin_edges(y: np.ndarray, n_bins: int, *, binning: str, max_length: float | None) -> np.ndarray:
    """[n_bins + 1] non-decreasing edges over [min(0, y.min()), max_length or y.max()].

    "quantile": inner edges at the quantiles k/n_bins of y (clipped to the span); ties (e.g. many capped
    lengths) give zero-width bins, which no target falls in. "uniform": equal widths.
    """
    lo = min(0.0, float(y.min()))
    hi = float(max_length) if max_length is not None else float(y.max())
    if hi <= lo:
        hi = lo + 1.0
    if binning == "uniform":
        return np.linspace(lo, hi, n_bins + 1)
    inner = np.quantile(np.clip(y, lo, hi), np.linspace(0.0, 1.0, n_bins + 1)[1:-1])
    return np.concatenate([[lo], inner, [hi]])


def bin_index(y: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each length: edges[j] <= y < edges[j + 1]; below the first bin → 0, beyond the last → the last."""
    return np.clip(np.searchsorted(edges[1:-1], y, side="right"), 0, len(edges) - 2).astype(np.int64)


def bin_centres(y: np.ndarray, edges: np.ndarray, *, binning: str) -> np.ndarray:
    """Midpoints ("uniform"), or the mean training length in each bin ("quantile"; midpoint if empty)."""
    mid = (edges[:-1] + edges[1:]) / 2
    if binning == "uniform":
        return mid
    k = len(edges) - 1
    idx = bin_index(y, edges)
    sums = np.bincount(idx, weights=np.clip(y, edges[0], edges[-1]), minlength=k)
    counts = np.bincount(idx, minlength=k)
    return np.where(counts > 0, sums / np.maximum(counts, 1), mid)


def choose_knots(edges: np.ndarray, probs: np.ndarray, y: np.ndarray, uniform: np.ndarray, shaped: np.ndarray
                 ) -> tuple[str, np.ndarray, dict[str, float]]:
    """("uniform" | "training", its knots, both readings' MAE of the median on y): the lower MAE, a tie uniform."""
    mae = {name: float(np.abs(Histogram(edges, probs, k).quantile([0.5])[:, 0] - y).mean())
           for name, k in (("uniform", uniform), ("training", shaped))}
    pick = "training" if mae["training"] < mae["uniform"] else "uniform"
    return pick, (shaped if pick == "training" else uniform), mae


def saved_knots(head: Any, knots: np.ndarray | None, uniform: Callable[[], np.ndarray]) -> np.ndarray:
    """A loaded head's within-bin shape (`bin_knots` / `bucket_knots`). A save without one predates `within_bin`
    and was read uniformly: the head's `within_bin` is set to say so (with a warning if it claimed otherwise),
    so that its setting never names a reading it does not apply."""
    if knots is not None:
        return knots
    if head.within_bin != "uniform":
        log.warning("%s: the save has no within-bin shape (written before within_bin existed); its bins are "
                    "read uniformly", head.name)
    head.within_bin = "uniform"
    return uniform()


def build_mlp(d: int, hidden: int, k: int, *, layer_norm: bool, dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(d, hidden)]
    if layer_norm:
        layers.append(nn.LayerNorm(hidden))
    layers.append(nn.ReLU())
    if dropout > 0:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(hidden, k))
    return nn.Sequential(*layers)


class BinnedMLPHead(BaseHead):
    """Shared machinery of the binned heads; the defaults are EGTP's, subclasses change them."""

    input_kind = "features"
    predicts_distribution = True
    _parameter_constraints: dict = {
        "hidden": [Interval(Integral, 1, None, closed="left"), None],
        "n_bins": [Interval(Integral, 2, None, closed="left")],
        "layer_norm": ["boolean"],
        "dropout": [Interval(Real, 0, 1, closed="left")],
        "soft_labels": ["boolean"],
        "ce_weight": [Interval(Real, 0, None, closed="left")],
        "mse_weight": [Interval(Real, 0, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "max_length": [Interval(Real, 0, None, closed="neither"), None],
        "binning": [StrOptions(set(BINNINGS))],
        "within_bin": [StrOptions(set(WITHIN_BIN))],
        "decode": [StrOptions({"expected", "argmax"})],
        "random_state": [Interval(Integral, 0, None, closed="left")],
        "n_threads": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
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
    ) -> None:
        self.hidden = hidden
        self.n_bins = n_bins
        self.layer_norm = layer_norm
        self.dropout = dropout
        self.soft_labels = soft_labels
        self.ce_weight = ce_weight
        self.mse_weight = mse_weight
        self.lr = lr
        self.weight_decay = weight_decay
        self.epochs = epochs
        self.batch_size = batch_size
        self.max_length = max_length
        self.binning = binning
        self.within_bin = within_bin
        self.decode = decode
        self.random_state = random_state
        self.n_threads = n_threads
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change

    # -- fitting -----------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> BinnedMLPHead:
        """Fresh model, `epochs` passes over (X, y); with `early_stopping` at most `epochs` (see `_run_epochs`)."""
        self._validate_params()
        X = validate_data(self, X, dtype=np.float32)
        y = check_targets(y, len(X))
        fit_rows, held = self._held_out_rows(len(X))
        Xf, yf = X[fit_rows], y[fit_rows]
        self._init_state(Xf, yf)
        with torch_threads(self.n_threads):
            self._run_epochs(lambda: self._epoch(Xf, yf), None if held is None else (X[held], y[held]))
        return self

    def _held_out_rows(self, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(rows trained on, rows held out for early stopping or None): a seeded `validation_fraction` of
        the training rows, as sklearn's MLP does; the bins are fitted on the rows trained on."""
        if not self.early_stopping:
            return np.arange(n), None
        n_held = max(2, int(round(self.validation_fraction * n)))
        if n - n_held < 2:
            raise HeadInputError(f"early_stopping: {n} training rows leave too few after holding out {n_held}")
        perm = np.random.default_rng(self.random_state).permutation(n)
        return np.sort(perm[n_held:]), np.sort(perm[:n_held])

    def _run_epochs(self, epoch: Callable[[], None], held: tuple[Any, np.ndarray] | None) -> None:
        """`epochs` passes; with a held-out set (X, y), stop after `n_iter_no_change` epochs without a better
        held-out Spearman and restore the best epoch's weights (`best_epoch_`, `validation_scores_`)."""
        self.validation_scores_: list[float] = []
        best, best_state, stale = -np.inf, None, 0
        for _ in range(self.epochs):
            epoch()
            if held is None:
                continue
            rho = spearman_or_nan(held[1], self.predict(held[0]))
            self.validation_scores_.append(rho)
            if np.isfinite(rho) and rho > best:
                best, stale, self.best_epoch_ = rho, 0, self.n_epochs_
                best_state = copy.deepcopy(self.module_.state_dict())
            else:
                stale += 1
                if stale >= self.n_iter_no_change:
                    break
        if best_state is not None:
            self.module_.load_state_dict(best_state)
            self._restored()

    def _restored(self) -> None:
        """Hook after the best epoch's weights are restored (state kept outside `module_`)."""

    def partial_fit(self, X: Any, y: Any) -> BinnedMLPHead:
        """One pass over (X, y), continuing the current model (initialised from this batch if unfitted)."""
        first = not hasattr(self, "module_")
        if first:
            self._validate_params()
        X = validate_data(self, X, dtype=np.float32, reset=first)
        y = check_targets(y, len(X))
        if first:
            self._init_state(X, y)
        with torch_threads(self.n_threads):
            self._epoch(X, y)
        return self

    def _init_state(self, X: np.ndarray, y: np.ndarray) -> None:
        self.bin_edges_ = bin_edges(y, self.n_bins, binning=self.binning, max_length=self.max_length)
        self.bin_centres_ = bin_centres(y, self.bin_edges_, binning=self.binning)
        self.shaped_knots_ = within_bin_knots(y, self.bin_edges_) if self.within_bin != "uniform" else None
        self.within_bin_ = "training" if self.within_bin == "training" else "uniform"
        self.bin_knots_ = self.shaped_knots_ if self.within_bin_ == "training" else self._uniform_knots()
        self.x_mean_ = X.mean(axis=0).astype(np.float32)
        std = X.std(axis=0).astype(np.float32)
        self.x_scale_ = np.where(std > 1e-6, std, 1.0).astype(np.float32)
        torch.manual_seed(self.random_state)
        self.module_ = self._build(X.shape[1])
        self.optimizer_ = self._make_optimizer()
        self.n_epochs_ = 0

    def _uniform_knots(self) -> np.ndarray:
        """Histogram `knots` that read every bin uniformly."""
        return np.stack([self.bin_edges_[:-1], self.bin_edges_[1:]], axis=1)

    def tune_on_validation(self, X: Any, y: Any) -> BinnedMLPHead:
        """With `within_bin="validation"`: read the bins uniformly or on their training lengths, whichever gives
        the lower MAE of the median on (X, y); a tie keeps uniform. Records `within_bin_` and both MAEs."""
        check_is_fitted(self)
        if self.within_bin != "validation":
            return self
        if getattr(self, "shaped_knots_", None) is None:  # fitted under another within_bin, then set_params
            log.warning("%s: no training-length shape to choose (fitted with another within_bin): kept %s",
                        self.name, self.within_bin_)
            return self
        p = self.predict_bins(X)
        self.within_bin_, self.bin_knots_, self.within_bin_mae_ = choose_knots(
            self.bin_edges_, p, check_targets(y, len(p)), self._uniform_knots(), self.shaped_knots_)
        return self

    def _make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.module_.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    def _build(self, d: int) -> nn.Sequential:
        hidden = self.hidden if self.hidden is not None else max(d // 2, 1)
        return build_mlp(d, hidden, self.n_bins, layer_norm=self.layer_norm, dropout=self.dropout)

    def _labels(self, y: np.ndarray) -> torch.Tensor:
        idx = bin_index(y, self.bin_edges_)
        if not self.soft_labels:
            return torch.nn.functional.one_hot(torch.from_numpy(idx), self.n_bins).float()
        dist = np.abs(np.arange(self.n_bins)[None, :] - idx[:, None])  # [n, K]
        q = np.exp(-dist)
        return torch.from_numpy(q / q.sum(axis=1, keepdims=True)).float()

    def _epoch(self, X: np.ndarray, y: np.ndarray) -> None:
        Xt = torch.from_numpy((X - self.x_mean_) / self.x_scale_)  # [n, d]
        self._train_epoch(len(Xt), y, lambda b: self.module_(Xt[b]))

    def _train_epoch(self, n: int, y: np.ndarray, logits_of: Any) -> None:
        """One shuffled pass: `logits_of(batch indices)` gives [b, K] bin logits (heads differ only there)."""
        q = self._labels(y)  # [n, K]
        scale = float(self.bin_edges_[-1] - self.bin_edges_[0])
        yt = torch.from_numpy(((y - self.bin_edges_[0]) / scale).astype(np.float32))
        centres = torch.from_numpy(((self.bin_centres_ - self.bin_edges_[0]) / scale).astype(np.float32))
        gen = torch.Generator().manual_seed(self.random_state + self.n_epochs_)
        order = torch.randperm(n, generator=gen)
        self.module_.train()
        for start in range(0, n, self.batch_size):
            b = order[start : start + self.batch_size]
            logp = torch.log_softmax(logits_of(b), dim=1)  # [b, K]
            loss = self.ce_weight * -(q[b] * logp).sum(dim=1).mean()
            if self.mse_weight > 0:
                loss = loss + self.mse_weight * ((logp.exp() @ centres - yt[b]) ** 2).mean()
            self.optimizer_.zero_grad()
            loss.backward()
            self.optimizer_.step()
        self.n_epochs_ += 1

    # -- prediction --------------------------------------------------------------------------------
    def predict_bins(self, X: Any) -> np.ndarray:
        """[n, n_bins] bin probabilities."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float32, reset=False)
        self.module_.eval()
        with torch_threads(self.n_threads), torch.no_grad():
            logits = self.module_(torch.from_numpy((X - self.x_mean_) / self.x_scale_))
        return torch.softmax(logits, dim=1).double().numpy()

    def predict_dist(self, X: Any) -> Histogram:
        """The bin probabilities the head computes, as a distribution: inside each bin uniform or shaped like
        its training lengths (`within_bin`; a point mass in a zero-width bin). The last bin ends at the
        training maximum (the cap when samples were capped). Its mean follows that shape, `predict` uses the
        bins' training means (`bin_centres_`): they differ by less than a bin's width."""
        return Histogram(self.bin_edges_, self.predict_bins(X), self.bin_knots_)

    def predict(self, X: Any) -> np.ndarray:
        return self._decode(self.predict_bins(X))

    def _decode(self, p: np.ndarray) -> np.ndarray:
        if self.decode == "argmax":
            return self.bin_centres_[p.argmax(axis=1)].astype(np.float64)
        return p @ self.bin_centres_

    def predict_points(self, X: Any) -> Points:
        """Mean Σ p̂_j c_j (`decode="expected"`'s prediction); median where `predict_dist`'s cdf reaches 0.5.
        (`predict` skips the median's per-row search.)"""
        p = self.predict_bins(X)
        median = Histogram(self.bin_edges_, p, self.bin_knots_).quantile([0.5])[:, 0] if len(p) else np.zeros(0)
        return Points(self._decode(p), median, p @ self.bin_centres_)

    # -- persistence -------------------------------------------------------------------------------
    def _state(self):
        arrays = {f"mlp.{k}": v.detach().numpy() for k, v in self.module_.state_dict().items()}
        arrays |= {
            "x_mean": self.x_mean_,
            "x_scale": self.x_scale_,
            "bin_edges": self.bin_edges_,
            "bin_centres": self.bin_centres_,
            "bin_knots": self.bin_knots_,
        }
        if getattr(self, "shaped_knots_", None) is not None:  # None in heads pickled before within_bin
            arrays["bin_knots_shaped"] = self.shaped_knots_
        return arrays, {"n_features_in": self.n_features_in_, "n_epochs": self.n_epochs_,
                        "within_bin": getattr(self, "within_bin_", "uniform"),
                        "within_bin_mae": getattr(self, "within_bin_mae_", None)}

    def _set_state(self, arrays, meta, path):
        self.n_features_in_ = int(meta["n_features_in"])
        self.n_epochs_ = int(meta["n_epochs"])
        self.x_mean_, self.x_scale_ = arrays["x_mean"], arrays["x_scale"]
        self.bin_edges_ = arrays["bin_edges"]
        if "bin_centres" in arrays:
            self.bin_centres_ = arrays["bin_centres"]
        else:  # saved before `binning` existed: equal-width bins with midpoint centres
            self.binning = "uniform"
            self.bin_centres_ = (self.bin_edges_[:-1] + self.bin_edges_[1:]) / 2
        self.bin_knots_ = saved_knots(self, arrays.get("bin_knots"), self._uniform_knots)
        self.shaped_knots_ = arrays.get("bin_knots_shaped")
        self.within_bin_ = str(meta.get("within_bin", "uniform" if self.within_bin == "validation" else self.within_bin))
        self.module_ = self._build(self.n_features_in_)
        state = {
            k.removeprefix("mlp."): torch.from_numpy(v) for k, v in arrays.items() if k.startswith("mlp.")
        }
        self.module_.load_state_dict(state)
        self.optimizer_ = self._make_optimizer()

    # The optimizer is pickled as its state dict: dill (imported by `datasets`) rewires pure-Python
    # picklers such as joblib's and cannot pickle torch.optim classes; the state dict is plain tensors.
    def __getstate__(self) -> dict:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        opt = state.pop("optimizer_", None)
        if opt is not None:
            state["_optimizer_state"] = opt.state_dict()
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        opt_state = state.pop("_optimizer_state", None)
        self.__dict__.update(state)
        if opt_state is not None:
            self.optimizer_ = self._make_optimizer()
            self.optimizer_.load_state_dict(opt_state)

    @property
    def n_parameters(self) -> int:
        check_is_fitted(self)
        return int(sum(p.numel() for p in self.module_.parameters()))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


@HEADS.register("egtp")
class EGTPHead(BinnedMLPHead):
    """ForeLen's EGTP head on entropy-pooled features: d → d/2, LayerNorm, ReLU, dropout 0.1 → 20 bins."""

    name = "egtp"


@HEADS.register("estp")
class ESTPHead(EGTPHead):
    """ESTP: the EGTP head on entropy+attention fused pooling (the pooling is chosen by the feature)."""

    name = "estp"


@HEADS.register("probe")
class ProbeHead(BinnedMLPHead):
    """TRAIL's probe: Linear(d, 512) – ReLU – Linear(512, 10 bins), cross-entropy. TRAIL's own bins are
    `binning="uniform", max_length=512`; the default here is quantile bins (robust to long tails)."""

    name = "probe"

    def __init__(
        self,
        *,
        hidden: int | None = 512,
        n_bins: int = 10,
        layer_norm: bool = False,
        dropout: float = 0.0,
        soft_labels: bool = False,
        ce_weight: float = 1.0,
        mse_weight: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        epochs: int = 30,
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
    ) -> None:
        super().__init__(**{k: v for k, v in locals().items() if k not in ("self", "__class__")})
