"""The serving model fine-tuned as its own length predictor: LoRA on its top decoder layers, a small head on the
last prompt token (the idea of Zheng et al., "Response Length Perception and Sequence Scheduling", NeurIPS 2023:
tune the serving LLM itself to perceive its answer's length; LEAP's frozen readout, head `linear`, is the cheap end).

Model: the serving checkpoint (`model`: an HF folder; None = the embedded SmolLM2-135M as scripts/prepare_model.py
prepared it) read up to the readout's layer (`layer`: the HF hidden_states index, so the head reads the state
`hs.L<layer>.last` is made of, adapted). LoRA (`peft`) on `target_modules` of the top `lora_layers` decoder layers
below `layer` (rank `rank`, scale `lora_alpha` / `rank`); every other weight is frozen. Output: the last real
prompt token's state, standardised with the training prompts' unadapted states, then one linear layer, started at
the ridge readout of those states (so before its first step the head is LEAP's linear readout on the same layer).
`objective="reg"`: standardised log1p(length), smeared back to tokens as proxy_reg; `"rank"`: ListMLE on groups of
`group_size` prompts, a score mapped to tokens by the training set's quantiles as proxy_rank.

Training is the proxy heads' loop (lengthpred.heads.proxy: AdamW, shuffled length-sorted batches, the same
targets, calibration and points). The frozen layers' output for a prompt is computed once and kept (`FrozenCache`,
bounded, per process), so epochs, the calibration pass and the search's candidates that share the frozen depth run
only the adapted layers; the validation prompts' frozen part is shared by every candidate the same way.

Prediction costs one partial prefill with the adapter (layer / number of layers of a full one): the adapter changes
the states, so a server runs it beside its own prefill unless it serves the adapter too.

X: one chat per prompt (a list of {role, content} messages: `HeadInput.messages`), templated and truncated exactly
as extraction does (`lengthpred.prompting.encode_prompt`, `max_prompt_tokens`, overflow truncate).

Bad input, one line before any work (`check_config`, which the training loop runs for every candidate first):
target modules the model's layers lack, a rank of 0 or over the hidden size, a layer or adapted depth the model
does not have.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from torch import nn

from lengthpred.errors import ModelError
from lengthpred.heads.base import HEADS, HeadInputError
from lengthpred.heads.proxy import ProxyHead
from lengthpred.models.device import resolve_device
from lengthpred.models.partial import decoder_of, last_real, pad_states, right_pad, run_layers, states
from lengthpred.prompting import encode_prompt
from lengthpred.ridge_select import grouped_ridge_cv

log = logging.getLogger(__name__)

ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RIDGE_ALPHAS = (0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5)  # the warm start's ridge, chosen by LOO on the train prompts


class FrozenCache:
    """Per-prompt states entering the first adapted layer, keyed by (model, depth, token ids), bounded in bytes:
    the frozen part of the serving model gives every candidate, epoch and pass the same states."""

    def __init__(self, max_bytes: float = 3e9) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def key(model: str, depth: int, ids: Sequence[int]) -> str:
        h = hashlib.sha1(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()
        return f"{model}|{depth}|{h}"

    def get(self, key: str) -> torch.Tensor | None:
        v = self._entries.get(key)
        if v is not None:
            self._entries.move_to_end(key)
        return v

    def put(self, key: str, value: torch.Tensor) -> None:
        if key in self._entries:
            return
        self._entries[key] = value
        self._bytes += value.numel() * value.element_size()
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.numel() * old.element_size()

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


FROZEN = FrozenCache()


def serving_model_dir(model: str | None) -> str:
    """The checkpoint folder the head adapts: `model`, or the embedded serving model's prepared copy."""
    if model is not None:
        return str(model)
    from lengthpred.models.checkpoint import checkpoint_dir
    from lengthpred.models.specs import embedded_serving_spec

    return checkpoint_dir(embedded_serving_spec())


def check_lora(model_dir: str, *, target_modules: Sequence[str], rank: int, layer: int, lora_layers: int) -> None:
    """One HeadInputError line for a LoRA set-up the model cannot take, read from its config alone (the modules of
    a meta-device copy: no weights loaded)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(model_dir)
    except (OSError, ValueError) as e:
        raise ModelError(f"lora: cannot read the model config in {model_dir} ({e.__class__.__name__})") from None
    n, d = int(config.num_hidden_layers), int(config.hidden_size)
    if not 1 <= int(rank) <= d:
        raise HeadInputError(f"lora rank={rank}: use 1 to the hidden size {d} of {model_dir}")
    if not 1 <= int(layer) <= n:
        raise HeadInputError(f"lora layer={layer}: the model's hidden_states run 1..{n} (0 is the embeddings)")
    if not 1 <= int(lora_layers) <= int(layer):
        raise HeadInputError(f"lora lora_layers={lora_layers}: adapt 1 to layer={layer} decoder layers below the "
                             "layer the head reads")
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config)
    have = sorted({name.rsplit(".", 1)[-1] for name, mod in decoder_of(meta).layers[0].named_modules()
                   if isinstance(mod, nn.Linear)})
    missing = sorted(set(target_modules) - set(have))
    if missing or not target_modules:
        raise HeadInputError(f"lora target_modules {missing or '[]'}: the model's decoder layers have {have}")


def _messages(X: Any) -> list[list[dict]]:
    if isinstance(X, str) or not all(isinstance(m, list | tuple) and all(isinstance(t, dict) for t in m) for m in X):
        raise HeadInputError("the lora head takes X as one chat per prompt: a list of [{role, content}, ...] lists")
    return [list(m) for m in X]


@HEADS.register("lora")
class LoraHead(ProxyHead):
    """The serving model with LoRA on its top layers and a linear head on the last prompt token (module docstring)."""

    name = "lora"
    input_kind = "messages"
    _parameter_constraints: dict = {
        **{k: v for k, v in ProxyHead._parameter_constraints.items()
           if k not in ("encoder", "max_seq_len", "n_buckets", "within_bin")},
        "model": [str, None],
        "layer": [Interval(Integral, 1, None, closed="left")],
        "lora_layers": [Interval(Integral, 1, None, closed="left")],
        "rank": [Interval(Integral, 1, None, closed="left")],
        "lora_alpha": [Interval(Real, 0, None, closed="neither")],
        "lora_dropout": [Interval(Real, 0, 1, closed="left")],
        "target_modules": ["array-like"],
        "objective": [StrOptions({"reg", "rank"})],
        "max_prompt_tokens": [Interval(Integral, 8, None, closed="left"), None],
    }

    def __init__(
        self,
        *,
        model: str | None = None,
        layer: int = 20,
        lora_layers: int = 8,
        rank: int = 8,
        lora_alpha: float = 16.0,
        lora_dropout: float = 0.0,
        target_modules: Sequence[str] = ALL_PROJECTIONS,
        objective: str = "reg",
        max_prompt_tokens: int | None = 1024,
        epochs: int = 2,
        batch_size: int = 8,
        lr: float = 3e-4,
        weight_decay: float = 0.0,
        group_size: int = 10,
        random_state: int = 0,
        n_threads: int = 1,
        progress: bool = True,
        device: str = "cpu",
    ) -> None:
        self.model = model  # the serving checkpoint folder (None: the embedded SmolLM2-135M)
        self.layer = layer  # HF hidden_states index read (the readout's layer)
        self.lora_layers = lora_layers  # decoder layers layer-lora_layers .. layer-1 adapted
        self.rank = rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.target_modules = target_modules
        self.objective = objective  # reg | rank
        self.max_prompt_tokens = max_prompt_tokens  # as extraction: longer prompts keep their head and last 32
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.group_size = group_size
        self.random_state = random_state
        self.n_threads = n_threads
        self.progress = progress
        self.device = device

    # -- checks and inputs -------------------------------------------------------------------------
    def check_config(self) -> None:
        """Everything wrong with this set-up that the model's config shows, before any weight is loaded."""
        if int(self.rank) < 1:
            raise HeadInputError(f"lora rank={self.rank}: use 1 to the model's hidden size")
        check_lora(serving_model_dir(self.model), target_modules=list(self.target_modules), rank=int(self.rank),
                   layer=int(self.layer), lora_layers=int(self.lora_layers))

    def fit(self, X: Any, y: Any) -> LoraHead:
        self.check_config()
        return super().fit(X, y)

    @property
    def _start(self) -> int:
        """The first adapted decoder layer (states entering it are frozen)."""
        return int(self.layer) - int(self.lora_layers)

    def _tokenizer(self) -> Any:
        if getattr(self, "tokenizer_", None) is None:
            from transformers import AutoTokenizer

            self.tokenizer_ = AutoTokenizer.from_pretrained(serving_model_dir(self.model))
        return self.tokenizer_

    def _inputs(self, X: Any) -> list[list[int]]:
        """Token ids per prompt, templated and truncated as extraction does."""
        tok = self._tokenizer()
        over = "truncate" if self.max_prompt_tokens is not None else "reject"
        return [encode_prompt(tok, m, max_prompt_tokens=self.max_prompt_tokens, overflow=over, prompt_id=str(i))
                for i, m in enumerate(_messages(X))]

    # -- model ---------------------------------------------------------------------------------------
    def _build(self, encoder_dir: Path | None = None, *, pretrained: bool = True) -> None:
        from peft import LoraConfig, inject_adapter_in_model
        from transformers import AutoModelForCausalLM

        self._tokenizer()
        lm = AutoModelForCausalLM.from_pretrained(serving_model_dir(self.model), dtype=torch.float32,
                                                  attn_implementation="sdpa")
        decoder = decoder_of(lm).eval()
        for p in decoder.parameters():
            p.requires_grad_(False)
        config = LoraConfig(r=int(self.rank), lora_alpha=float(self.lora_alpha), lora_dropout=float(self.lora_dropout),
                            target_modules=list(self.target_modules), layers_pattern="layers",
                            layers_to_transform=list(range(self._start, int(self.layer))))
        self.encoder_ = inject_adapter_in_model(config, decoder)  # the decoder itself, adapted in place
        for name, p in self.encoder_.named_parameters():
            p.requires_grad_("lora_" in name)
        d = int(lm.config.hidden_size)
        self.hidden_size_ = d
        self.out_ = nn.Linear(d, 1)
        self.feat_mean_ = torch.zeros(d)
        self.feat_scale_ = torch.ones(d)

    def _build_for_fit(self) -> None:
        self._build()
        self._to(resolve_device(self.device))

    def _to(self, device: Any) -> None:
        self.device_ = str(device)
        self.encoder_.to(device)
        self.out_.to(device)
        self.feat_mean_ = self.feat_mean_.to(device)
        self.feat_scale_ = self.feat_scale_.to(device)

    def _trainable(self) -> list[nn.Parameter]:
        return [p for p in self.encoder_.parameters() if p.requires_grad] + list(self.out_.parameters())

    def _train_mode(self, on: bool) -> None:
        self.encoder_.train(on)

    def _n_out(self) -> int:
        return 1

    # -- the frozen part, once per prompt --------------------------------------------------------------
    def _frozen(self, items: list[list[int]]) -> list[torch.Tensor]:
        """Per prompt [t_i, d] states entering the first adapted layer (cached; computed in length-sorted batches)."""
        model = serving_model_dir(self.model)
        keys = [FrozenCache.key(model, self._start, ids) for ids in items]
        out: list[torch.Tensor | None] = [FROZEN.get(k) for k in keys]
        todo = sorted((i for i, v in enumerate(out) if v is None), key=lambda i: len(items[i]))
        dev = getattr(self, "device_", "cpu")
        pad = self._tokenizer().pad_token_id or 0
        step = max(int(self.batch_size), 16)
        with torch.no_grad():
            for k in range(0, len(todo), step):
                rows = todo[k:k + step]
                ids, mask = right_pad([items[i] for i in rows], pad)
                h = states(self.encoder_, ids.to(dev), mask.to(dev), 0, self._start)  # [b, t, d]
                for j, i in enumerate(rows):
                    out[i] = h[j, : len(items[i])].detach().float().cpu().clone()
                    FROZEN.put(keys[i], out[i])
        return [v for v in out if v is not None]

    def _top(self, batch: list[torch.Tensor]) -> torch.Tensor:
        """Frozen states of a batch → [b, d] the last real token's state at `layer` (adapted)."""
        dev = getattr(self, "device_", "cpu")
        h, mask = pad_states(batch)
        h, mask = h.to(dev), mask.to(dev)
        return last_real(run_layers(self.encoder_, h, mask, self._start, int(self.layer)), mask)

    def _train_inputs(self, items: list[list[int]], y: np.ndarray) -> list[torch.Tensor]:
        """The frozen states of the training prompts, and the warm start: the output layer set to the ridge readout
        of their unadapted last-token states (standardised), so training starts at LEAP's readout."""
        frozen = self._frozen(items)
        with torch.no_grad():
            feats = torch.cat([self._top(frozen[i:i + 32]) for i in range(0, len(frozen), 32)]).double().cpu()
        mean, scale = feats.mean(0), feats.std(0, unbiased=False).clamp(min=1e-6)  # as StandardScaler
        Z = ((feats - mean) / scale).numpy()
        t = (np.log1p(y) - self.target_mean_) / self.target_std_
        ridge = grouped_ridge_cv(RIDGE_ALPHAS, Z).fit(Z, t)
        self.warm_alpha_ = float(ridge.alpha_)
        dev = getattr(self, "device_", "cpu")
        self.feat_mean_, self.feat_scale_ = mean.float().to(dev), scale.float().to(dev)
        with torch.no_grad():
            self.out_.weight.copy_(torch.as_tensor(ridge.coef_, dtype=torch.float32).reshape(1, -1))
            self.out_.bias.fill_(float(ridge.intercept_))
        return frozen

    def _train_forward(self, batch: list[torch.Tensor]) -> torch.Tensor:
        return self.out_((self._top(batch) - self.feat_mean_) / self.feat_scale_)  # [b, 1]

    def _forward(self, items: list[list[int]]) -> torch.Tensor:
        return self._train_forward(self._frozen(items))

    def _outputs(self, items: list[Any], forward: Any = None) -> np.ndarray:
        if forward is None:  # token ids: their frozen part from the cache (computed once per prompt)
            items, forward = self._frozen(items), self._train_forward
        return super()._outputs(items, forward)

    # -- persistence ---------------------------------------------------------------------------------
    def _state(self):
        from peft import get_peft_model_state_dict

        adapter = get_peft_model_state_dict(self.encoder_)
        arrays = {f"lora.{k}": v.detach().cpu().numpy() for k, v in adapter.items()}
        arrays |= {f"out.{k}": v.detach().cpu().numpy() for k, v in self.out_.state_dict().items()}
        arrays |= {"feat_mean": self.feat_mean_.cpu().numpy(), "feat_scale": self.feat_scale_.cpu().numpy(),
                   "calib_scores": self.calib_scores_, "calib_tokens": self.calib_tokens_,
                   "target_stats": np.array([self.target_mean_, self.target_std_]),
                   "smearing": np.array([self.smearing_]), "bucket_edges": self.bucket_edges_,
                   "bucket_values": self.bucket_values_, "bucket_means": self.bucket_means_}
        return arrays, {"fit_seconds": self.fit_seconds_, "hidden_size": self.hidden_size_,
                        "warm_alpha": getattr(self, "warm_alpha_", None)}

    def _save_files(self, path: Path) -> None:
        """Nothing beside the arrays: the base weights are the serving model's (`model`), read again at load."""

    def _set_state(self, arrays, meta, path):
        from peft import set_peft_model_state_dict

        self._build()
        if int(meta["hidden_size"]) != self.hidden_size_:
            raise ModelError(f"{path}: saved for hidden size {meta['hidden_size']}, the model has {self.hidden_size_}")
        set_peft_model_state_dict(self.encoder_, {k.removeprefix("lora."): torch.from_numpy(v)
                                                  for k, v in arrays.items() if k.startswith("lora.")})
        self.out_.load_state_dict({k.removeprefix("out."): torch.from_numpy(v) for k, v in arrays.items()
                                   if k.startswith("out.")})
        self.feat_mean_ = torch.from_numpy(arrays["feat_mean"])
        self.feat_scale_ = torch.from_numpy(arrays["feat_scale"])
        self.encoder_.eval()
        self.calib_scores_, self.calib_tokens_ = arrays["calib_scores"], arrays["calib_tokens"]
        self.target_mean_, self.target_std_ = (float(v) for v in arrays["target_stats"])
        self.smearing_ = float(arrays["smearing"][0])
        self.bucket_edges_, self.bucket_values_ = arrays["bucket_edges"], arrays["bucket_values"]
        self.bucket_means_ = arrays["bucket_means"]
        self.fit_seconds_ = float(meta["fit_seconds"])
        self.warm_alpha_ = meta.get("warm_alpha")
        self.device_ = "cpu"

    @property
    def n_parameters(self) -> int:
        """Scalars the head adds to the serving model: the adapter, the output layer and the standardisation."""
        check_is_fitted(self)
        adapter = sum(p.numel() for n, p in self.encoder_.named_parameters() if "lora_" in n)
        return int(adapter + sum(p.numel() for p in self.out_.parameters()) + 2 * self.hidden_size_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = False
        return tags
