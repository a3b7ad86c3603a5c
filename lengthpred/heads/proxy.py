"""Proxy-model heads: a small encoder (the embedded all-MiniLM-L6-v2) fine-tuned on the prompt text.

`proxy_reg` (SSJF): regression of standardised log1p(length), back-transformed to the expected length
with Duan's smearing factor S (mean of exp(log residual) on the training prompts, `smearing_`;
lengthpred.heads.smearing): ŷ = S · exp(ẑ) − 1. In-sample residuals: a leave-one-out refit of a
fine-tuned encoder is out of reach, so S is, if anything, too small. `proxy_cls` (S3): classification into
`n_buckets` equal-frequency length buckets, prediction Σ p̂_j · (median length of bucket j).
`proxy_rank` (LTR): ListMLE ranking loss on groups of `group_size` prompts; its scores are mapped to
tokens by a monotone map fitted on the training set (score quantile → length quantile), so the ranking
is the model's and the scale is the training set's.

Points (`predict_points`): proxy_reg's median is expm1(ẑ), its mean the smeared prediction; proxy_cls's are
the median and mean of its bucket distribution (inside a bucket uniform for the median, or shaped like the
bucket's training lengths with `within_bin="training"`, or the better of the two on validation with `"validation"`;
each bucket's mean training length for the mean); proxy_rank has no calibrated mean (a ranking score carries no spread), and
its median is the quantile map above, which is the conditional median only as far as the ranking is right.

Encoder: plain `AutoModel` + `AutoTokenizer`, mean pooling over real tokens, then a linear layer.
X is a list of prompt strings.
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from torch import nn
from tqdm.auto import tqdm

from lengthpred.distributions import Histogram, within_bin_knots
from lengthpred.heads.base import HEADS, BaseHead, HeadInputError, Points, check_targets
from lengthpred.heads.binned import WITHIN_BIN, choose_knots, saved_knots, torch_threads
from lengthpred.heads.smearing import smeared_expm1, smearing_factor
from lengthpred.models.device import resolve_device
from lengthpred.models.specs import embedded_proxy_dir

log = logging.getLogger(__name__)

ENCODER_DIR = "encoder"


def _texts(X: Any) -> list[str]:
    if isinstance(X, str) or not all(isinstance(t, str) for t in X):
        raise HeadInputError("proxy heads take X as a list of prompt strings")
    return list(X)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[b, t, h], [b, t] → [b, h]: average over real (unmasked) tokens."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


def listmle_loss(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ListMLE (Xia et al. 2008) on one group: −log P(true order | scores), longest first."""
    s = scores[torch.argsort(y, descending=True)]
    # log Σ_{k≥i} exp(s_k) for every i, by a reversed cumulative logsumexp
    tail = torch.logcumsumexp(s.flip(0), dim=0).flip(0)
    return (tail - s).sum()


class ProxyHead(BaseHead):
    """Shared fine-tuning loop; subclasses set `objective` ("reg" | "cls" | "rank"). `n_buckets` is a
    keyword of `proxy_cls` only (as is `within_bin`) and `group_size` of `proxy_rank` only; the class values below are what the
    others use (buckets are fitted and saved by every proxy; only `proxy_cls` predicts from them)."""

    input_kind = "texts"
    objective = "reg"
    n_buckets = 10
    within_bin = "uniform"
    group_size = 10
    _parameter_constraints: dict = {
        "encoder": [str, None],
        "max_seq_len": [Interval(Integral, 8, None, closed="left")],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "n_buckets": [Interval(Integral, 2, None, closed="left")],
        "within_bin": [StrOptions(set(WITHIN_BIN))],
        "group_size": [Interval(Integral, 2, None, closed="left")],
        "random_state": [Interval(Integral, 0, None, closed="left")],
        "n_threads": [Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "progress": ["boolean"],
    }

    def __init__(
        self,
        *,
        encoder: str | None = None,
        max_seq_len: int = 256,
        epochs: int = 3,
        batch_size: int = 16,
        lr: float = 5e-5,
        weight_decay: float = 0.01,
        random_state: int = 0,
        n_threads: int = 1,
        progress: bool = True,
        device: str = "cpu",
    ) -> None:
        self.encoder = encoder
        self.max_seq_len = max_seq_len
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.random_state = random_state
        self.n_threads = n_threads
        self.progress = progress
        self.device = device  # where the encoder trains and predicts: cpu | cuda | auto (LOCAL_RANK applies)

    # -- model ---------------------------------------------------------------------------------------
    def _encoder_dir(self) -> Path:
        if self.encoder is not None:
            return Path(self.encoder)
        return embedded_proxy_dir()

    def _n_out(self) -> int:
        return self.n_buckets if self.objective == "cls" else 1

    def _build(self, encoder_dir: Path, *, pretrained: bool) -> None:
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        self.tokenizer_ = AutoTokenizer.from_pretrained(str(encoder_dir))
        if pretrained:
            self.encoder_ = AutoModel.from_pretrained(str(encoder_dir))
        else:
            self.encoder_ = AutoModel.from_config(AutoConfig.from_pretrained(str(encoder_dir)))
        self.out_ = nn.Linear(self.encoder_.config.hidden_size, self._n_out())

    def _to(self, device: Any) -> None:
        """Encoder and output layer onto `device` (a loaded head predicts on the CPU)."""
        self.device_ = str(device)
        self.encoder_.to(device)
        self.out_.to(device)

    def _forward(self, texts: list[str]) -> torch.Tensor:
        enc = self.tokenizer_(
            texts, truncation=True, max_length=self.max_seq_len, padding=True, return_tensors="pt"
        )
        dev = getattr(self, "device_", "cpu")
        ids, mask = enc["input_ids"].to(dev), enc["attention_mask"].to(dev)
        hidden = self.encoder_(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.out_(mean_pool(hidden, mask))  # [b, n_out]

    # -- fitting -------------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> ProxyHead:
        self._validate_params()
        items = self._inputs(X)
        y = check_targets(y, len(items))
        if np.any(y < 0):
            raise HeadInputError(f"{self.name} heads need lengths >= 0")
        torch.manual_seed(self.random_state)
        self._build_for_fit()
        self._fit_targets(y)
        params = self._trainable()
        opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        rng = np.random.default_rng(self.random_state)
        batch = self.group_size if self.objective == "rank" else self.batch_size
        t0 = time.perf_counter()
        with torch_threads(self.n_threads):
            train = self._train_inputs(items, y)
            self._train_mode(True)
            for epoch in range(self.epochs):
                batches = self._batches(items, rng, batch)
                for b in tqdm(
                    batches, desc=f"{self.name} epoch {epoch + 1}/{self.epochs}", disable=not self.progress
                ):
                    out = self._train_forward([train[i] for i in b])
                    loss = self._loss(out, y[b])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            self._train_mode(False)
            self._calibrate(self._raw_from(self._outputs(train, self._train_forward)), y)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    # -- the hooks a model-fine-tuning head overrides (lengthpred.heads.lora: the serving model with LoRA) ------
    def _inputs(self, X: Any) -> list[Any]:
        """X as the per-prompt items `_forward` reads (here: prompt strings), checked before any work."""
        return _texts(X)

    def _build_for_fit(self) -> None:
        self._build(self._encoder_dir(), pretrained=True)
        self._to(resolve_device(self.device))

    def _trainable(self) -> list[nn.Parameter]:
        return list(self.encoder_.parameters()) + list(self.out_.parameters())

    def _train_inputs(self, items: list[Any], y: np.ndarray) -> list[Any]:
        """What `_train_forward` reads per training prompt (here the items themselves; a head may precompute
        what its frozen part makes of them once, instead of once per epoch, and start its output from `y`)."""
        return items

    def _train_forward(self, batch: list[Any]) -> torch.Tensor:
        return self._forward(batch)

    def _train_mode(self, on: bool) -> None:
        self.encoder_.train(on)

    def _batches(self, texts: list[Any], rng: np.random.Generator, size: int) -> list[np.ndarray]:
        """Shuffled batches; within chunks of 8 batches, similar lengths go together (less padding)."""
        order = rng.permutation(len(texts))
        if self.objective != "rank":
            chunk = 8 * size
            order = np.concatenate(
                [
                    sorted(order[i : i + chunk], key=lambda j: len(texts[j]))
                    for i in range(0, len(order), chunk)
                ]
            ).astype(np.int64)
        out = [order[i : i + size] for i in range(0, len(order), size)]
        return [b for b in out if len(b) >= (2 if self.objective == "rank" else 1)]

    def _fit_targets(self, y: np.ndarray) -> None:
        ly = np.log1p(y)
        self.target_mean_, self.target_std_ = float(ly.mean()), float(max(ly.std(), 1e-6))
        qs = np.quantile(y, np.linspace(0, 1, self.n_buckets + 1))
        self.bucket_edges_ = qs
        idx = self._bucket(y)
        self.bucket_values_ = np.array(
            [
                np.median(y[idx == j]) if np.any(idx == j) else (qs[j] + qs[j + 1]) / 2
                for j in range(self.n_buckets)
            ]
        )
        self.bucket_means_ = np.array(
            [y[idx == j].mean() if np.any(idx == j) else (qs[j] + qs[j + 1]) / 2 for j in range(self.n_buckets)]
        )
        self.shaped_knots_ = within_bin_knots(y, self.bucket_edges_) if self.within_bin != "uniform" else None
        self.within_bin_ = "training" if self.within_bin == "training" else "uniform"
        self.bucket_knots_ = self.shaped_knots_ if self.within_bin_ == "training" else self._uniform_knots()

    def _uniform_knots(self) -> np.ndarray:
        """Histogram `knots` that read every bucket uniformly (proxy_cls's median)."""
        return np.stack([self.bucket_edges_[:-1], self.bucket_edges_[1:]], axis=1)

    def tune_on_validation(self, X: Any, y: Any) -> ProxyHead:
        """proxy_cls with `within_bin="validation"`: its buckets read uniformly or on their training lengths,
        whichever gives the lower MAE of the median on (X, y), as the binned heads do (`within_bin_`)."""
        check_is_fitted(self)
        if self.objective != "cls" or self.within_bin != "validation":
            return self
        if getattr(self, "shaped_knots_", None) is None:  # fitted under another within_bin, then set_params
            log.warning("%s: no training-length shape to choose (fitted with another within_bin): kept %s",
                        self.name, self.within_bin_)
            return self
        texts = self._inputs(X)
        with torch_threads(self.n_threads):
            p = _softmax(self._outputs(texts))
        self.within_bin_, self.bucket_knots_, self.within_bin_mae_ = choose_knots(
            self.bucket_edges_, p, check_targets(y, len(texts)), self._uniform_knots(), self.shaped_knots_)
        return self

    def _bucket(self, y: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(self.bucket_edges_[1:-1], y, side="right"), 0, self.n_buckets - 1)

    def _loss(self, out: torch.Tensor, y: np.ndarray) -> torch.Tensor:
        if self.objective == "reg":
            t = torch.from_numpy(((np.log1p(y) - self.target_mean_) / self.target_std_).astype(np.float32))
            return ((out[:, 0] - t.to(out.device)) ** 2).mean()
        if self.objective == "cls":
            return nn.functional.cross_entropy(out, torch.from_numpy(self._bucket(y)).to(out.device))
        return listmle_loss(out[:, 0], torch.from_numpy(y).to(out.device))

    def _outputs(self, texts: list[Any], forward: Any = None) -> np.ndarray:
        """[n, n_out] network outputs: standardised log length (reg), bucket logits (cls), a score (rank);
        `forward` (default `_forward`) maps a batch of items to outputs."""
        forward = forward or self._forward
        outs = []
        with torch.no_grad():
            for i in range(0, len(texts), self.batch_size):
                outs.append(forward(texts[i : i + self.batch_size]).double().cpu())
        out = torch.cat(outs) if outs else torch.zeros((0, self._n_out()), dtype=torch.float64)
        return out.numpy()

    def _raw_from(self, out: np.ndarray) -> np.ndarray:
        """Per prompt: tokens (reg: expm1(ẑ), cls: Σ p̂_j · bucket median) or a ranking score (rank)."""
        if self.objective == "reg":
            return np.expm1(out[:, 0] * self.target_std_ + self.target_mean_)
        if self.objective == "cls":
            return _softmax(out) @ self.bucket_values_
        return out[:, 0]

    def _raw_predict(self, texts: list[str]) -> np.ndarray:
        return self._raw_from(self._outputs(texts))

    def _calibrate(self, raw: np.ndarray, y: np.ndarray) -> None:
        """Monotone score → tokens map (used by `rank`; identity data kept for the others); `reg`'s
        smearing factor from the training predictions (`raw` = expm1(ẑ))."""
        self.calib_scores_ = np.sort(raw)
        self.calib_tokens_ = np.sort(y)
        self.smearing_ = smearing_factor(np.log1p(y) - np.log1p(raw)) if self.objective == "reg" else 1.0

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        texts = self._inputs(X)
        with torch_threads(self.n_threads):
            raw = self._raw_predict(texts)
        if self.objective == "rank":
            return np.interp(raw, self.calib_scores_, self.calib_tokens_)
        if self.objective == "reg":
            return smeared_expm1(np.log1p(raw), self.smearing_)
        return raw

    def predict_points(self, X: Any) -> Points:
        """The configured prediction, median and mean from one encoder pass (module docstring)."""
        check_is_fitted(self)
        texts = self._inputs(X)
        with torch_threads(self.n_threads):
            out = self._outputs(texts)
        raw = self._raw_from(out)
        if self.objective == "rank":
            mapped = np.interp(raw, self.calib_scores_, self.calib_tokens_)
            return Points(mapped, mapped, None)
        if self.objective == "reg":
            mean = smeared_expm1(np.log1p(raw), self.smearing_)
            return Points(mean, raw, mean)
        p = _softmax(out)
        median = Histogram(self.bucket_edges_, p, self.bucket_knots_).quantile([0.5])[:, 0] if len(p) else np.zeros(0)
        mean = p @ self.bucket_means_ if self.bucket_means_ is not None else None
        return Points(raw, median, mean)

    # -- persistence ---------------------------------------------------------------------------------
    def _state(self):
        arrays = {f"encoder.{k}": v.detach().cpu().numpy() for k, v in self.encoder_.state_dict().items()}
        arrays |= {f"out.{k}": v.detach().cpu().numpy() for k, v in self.out_.state_dict().items()}
        arrays |= {
            "bucket_edges": self.bucket_edges_,
            "bucket_values": self.bucket_values_,
            "bucket_means": self.bucket_means_,
            "bucket_knots": self.bucket_knots_,
            "calib_scores": self.calib_scores_,
            "calib_tokens": self.calib_tokens_,
            "target_stats": np.array([self.target_mean_, self.target_std_]),
            "smearing": np.array([self.smearing_]),
        }
        if getattr(self, "shaped_knots_", None) is not None:  # None in heads pickled before within_bin
            arrays["bucket_knots_shaped"] = self.shaped_knots_
        return arrays, {"fit_seconds": self.fit_seconds_, "within_bin": getattr(self, "within_bin_", "uniform"),
                        "within_bin_mae": getattr(self, "within_bin_mae_", None)}

    def _save_files(self, path: Path) -> None:
        self.encoder_.config.save_pretrained(str(path / ENCODER_DIR))
        self.tokenizer_.save_pretrained(str(path / ENCODER_DIR))

    def _set_state(self, arrays, meta, path):
        self._build(path / ENCODER_DIR, pretrained=False)
        enc = {
            k.removeprefix("encoder."): torch.from_numpy(v)
            for k, v in arrays.items()
            if k.startswith("encoder.")
        }
        out = {k.removeprefix("out."): torch.from_numpy(v) for k, v in arrays.items() if k.startswith("out.")}
        self.encoder_.load_state_dict(enc)
        self.out_.load_state_dict(out)
        self.encoder_.eval()
        self.bucket_edges_, self.bucket_values_ = arrays["bucket_edges"], arrays["bucket_values"]
        self.bucket_means_ = arrays.get("bucket_means")  # None in saves before it: proxy_cls then has no mean
        self.bucket_knots_ = saved_knots(self, arrays.get("bucket_knots"), self._uniform_knots)
        self.shaped_knots_ = arrays.get("bucket_knots_shaped")
        self.within_bin_ = str(meta.get("within_bin", "uniform" if self.within_bin == "validation" else self.within_bin))
        self.calib_scores_, self.calib_tokens_ = arrays["calib_scores"], arrays["calib_tokens"]
        self.target_mean_, self.target_std_ = (float(v) for v in arrays["target_stats"])
        self.smearing_ = float(arrays["smearing"][0]) if "smearing" in arrays else 1.0  # older saves: expm1
        self.fit_seconds_ = float(meta["fit_seconds"])

    @property
    def n_parameters(self) -> int:
        check_is_fitted(self)
        return int(
            sum(p.numel() for p in self.encoder_.parameters())
            + sum(p.numel() for p in self.out_.parameters())
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags


def _softmax(out: np.ndarray) -> np.ndarray:
    return torch.softmax(torch.from_numpy(out), dim=1).numpy()


@HEADS.register("proxy_reg")
class ProxyRegHead(ProxyHead):
    """SSJF-style: regression of log1p(length) from the prompt text."""

    name = "proxy_reg"
    objective = "reg"


@HEADS.register("proxy_cls")
class ProxyClsHead(ProxyHead):
    """S3-style: length-bucket classification from the prompt text into `n_buckets` buckets."""

    name = "proxy_cls"
    objective = "cls"

    def __init__(self, *, n_buckets: int = 10, within_bin: str = "uniform", encoder: str | None = None,
                 max_seq_len: int = 256, epochs: int = 3, batch_size: int = 16, lr: float = 5e-5,
                 weight_decay: float = 0.01, random_state: int = 0, n_threads: int = 1, progress: bool = True,
                 device: str = "cpu") -> None:
        super().__init__(encoder=encoder, max_seq_len=max_seq_len, epochs=epochs, batch_size=batch_size, lr=lr,
                         weight_decay=weight_decay, random_state=random_state, n_threads=n_threads,
                         progress=progress, device=device)
        self.n_buckets = n_buckets
        self.within_bin = within_bin


@HEADS.register("proxy_rank")
class ProxyRankHead(ProxyHead):
    """LTR-style: ListMLE ranking on groups of `group_size` prompts."""

    name = "proxy_rank"
    objective = "rank"

    def __init__(self, *, group_size: int = 10, encoder: str | None = None, max_seq_len: int = 256,
                 epochs: int = 3, batch_size: int = 16, lr: float = 5e-5, weight_decay: float = 0.01,
                 random_state: int = 0, n_threads: int = 1, progress: bool = True,
                 device: str = "cpu") -> None:
        super().__init__(encoder=encoder, max_seq_len=max_seq_len, epochs=epochs, batch_size=batch_size, lr=lr,
                         weight_decay=weight_decay, random_state=random_state, n_threads=n_threads,
                         progress=progress, device=device)
        self.group_size = group_size
