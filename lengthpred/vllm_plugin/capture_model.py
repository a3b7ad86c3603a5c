"""The model side (vLLM's worker process): the readout's input, read where the model already computes it.

`capture_class(base)` subclasses vLLM's own class for the served architecture (registered in vLLM's model
registry by the plugin's entry point). The subclass asks the model for its EAGLE-3 auxiliary hidden state at the
readout's layer (`set_aux_hidden_state_layers((layer,))`: the residual stream after decoder layer layer − 1,
hidden + residual, which is Hugging Face's `hidden_states[layer]`), so the state is an output of vLLM's own
forward: it survives torch.compile and piecewise CUDA graphs, where a Python forward hook would not run. After each
forward that prefilled (a chunk of more than one token), it sends the state at the last token of every such chunk,
with the step's layout, to the scheduler (`channel`). The scheduler decides which rows are prompts' last tokens.

It stays inert (vLLM's class unchanged in behaviour) when the server's scheduler is not lengthpred's. Only tensor-
parallel rank 0 sends; pipeline parallelism and speculative decoding (which owns the auxiliary layers) are
refused at start-up.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError
from lengthpred.vllm_plugin import _vllm_private as private
from lengthpred.vllm_plugin.channel import RowSender, StepRows, address

log = logging.getLogger("vllm.lengthpred")  # under vLLM's logger: its handlers and format

SCHEDULER_QUALNAME = "lengthpred.vllm_plugin.scheduler.LengthAwareScheduler"


def is_our_scheduler(vllm_config: Any) -> bool:
    cls = getattr(vllm_config.scheduler_config, "scheduler_cls", None)
    if cls is None:
        return False
    if isinstance(cls, str):
        if cls == SCHEDULER_QUALNAME or cls == "lengthpred.vllm_plugin.LengthAwareScheduler":
            return True
        from vllm.utils.import_utils import resolve_obj_by_qualname

        try:
            cls = resolve_obj_by_qualname(cls)
        except Exception:  # a class vLLM itself will fail to resolve, with its own message
            return False
    from lengthpred.vllm_plugin.scheduler import LengthAwareScheduler

    return isinstance(cls, type) and issubclass(cls, LengthAwareScheduler)


class WorkerCapture:
    """Sends the readout layer's state at chunk ends, step by step (see the module docstring)."""

    def __init__(self, layer: int, sender: RowSender | None) -> None:
        self.layer = layer
        self.sender = sender  # None on a tensor-parallel rank other than 0
        self.n_steps = 0
        self.n_rows = 0
        self.seconds = 0.0

    @classmethod
    def attach(cls, model: Any, vllm_config: Any, layer: int, hidden_size: int) -> WorkerCapture | None:
        if not is_our_scheduler(vllm_config):
            log.warning("lengthpred: %s is set but the scheduler is not lengthpred's (--scheduler-cls %s); the "
                        "model runs unchanged", "LENGTHPRED_READOUT", SCHEDULER_QUALNAME)
            return None
        pc = vllm_config.parallel_config
        if int(getattr(pc, "pipeline_parallel_size", 1)) > 1:
            raise ConfigError("lengthpred's readout needs the whole model in one pipeline stage "
                              "(--pipeline-parallel-size 1)")
        if vllm_config.speculative_config is not None:
            raise ConfigError("lengthpred's readout uses the auxiliary hidden-state layers that speculative "
                              "decoding (EAGLE-3) also uses: serve without --speculative-config")
        if getattr(pc, "enable_dbo", False):
            raise ConfigError("lengthpred's readout does not split steps: serve without --enable-dbo")
        cfg = model.config if hasattr(model, "config") else vllm_config.model_config.hf_config
        n_layers = int(getattr(cfg, "num_hidden_layers", 0) or vllm_config.model_config.hf_config.num_hidden_layers)
        if not 1 <= layer < n_layers:
            raise ConfigError(f"the readout reads layer {layer}; this model has decoder layers 1..{n_layers - 1}")
        d = int(vllm_config.model_config.hf_config.hidden_size)
        if d != hidden_size:
            raise ConfigError(f"the readout has {hidden_size} features; this model's hidden size is {d}")
        if not hasattr(model, "set_aux_hidden_state_layers"):
            raise ConfigError(f"{type(model).__mro__[1].__name__} exposes no auxiliary hidden-state layers; "
                              "lengthpred reads the readout's state through them")
        model.set_aux_hidden_state_layers((int(layer),))
        sender = RowSender(address(private.instance_id(vllm_config))) if private.tp_rank() == 0 else None
        log.info("lengthpred: the model sends layer %d's state at prompt ends to the scheduler", layer)
        return cls(int(layer), sender)

    def after_forward(self, aux: Any) -> None:
        """`aux`: the auxiliary state [tokens, d] of this forward (padding rows after the real ones)."""
        if self.sender is None:
            return
        t = time.perf_counter()
        lay = private.step_layout()
        if lay is None or lay[2] <= 1:  # a warm-up forward, or a step of decodes only
            return
        qsl, seq_lens, _ = lay
        qlens = np.diff(qsl)
        chunks = np.flatnonzero(qlens > 1)
        idx = qsl[1:][chunks] - 1
        import torch

        rows = aux.index_select(0, torch.as_tensor(idx, device=aux.device)).float().cpu().numpy()
        spent = time.perf_counter() - t
        self.sender.send(StepRows(tuple(int(x) for x in qlens), tuple(int(x) for x in seq_lens),
                                  tuple(int(x) for x in chunks), rows, spent))
        self.n_steps += 1
        self.n_rows += len(idx)
        self.seconds += spent


def capture_class(base: type, layer: int, hidden_size: int) -> type:
    """vLLM's model class `base`, with the readout layer's state sent to the scheduler after each prefill."""

    class LengthpredCapture(base):  # type: ignore[misc, valid-type]
        def __init__(self, *, vllm_config: Any, prefix: str = "", **kwargs: Any) -> None:
            super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
            self._lengthpred = WorkerCapture.attach(self, vllm_config, layer, hidden_size)

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            out = super().forward(*args, **kwargs)
            cap = self._lengthpred
            if cap is None or not isinstance(out, tuple):
                return out
            hidden, aux = out
            cap.after_forward(aux[-1] if isinstance(aux, (list, tuple)) else aux)
            return hidden

    LengthpredCapture.__name__ = LengthpredCapture.__qualname__ = f"Lengthpred{base.__name__}"
    return LengthpredCapture
