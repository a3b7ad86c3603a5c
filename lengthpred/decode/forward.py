"""A teacher-forced forward that stops at the chosen layer: the layers above it are never run."""

from __future__ import annotations

import torch
from torch import nn

from lengthpred.errors import ConfigError
from lengthpred.features.capture import decoder_layers


class _Reached(Exception):
    """Carries the chosen layer's output out of the forward (raised by a hook, caught at once)."""

    def __init__(self, hidden: torch.Tensor):
        super().__init__()
        self.hidden = hidden


def check_layer(model: nn.Module, layer: int) -> int:
    """`layer` as a hidden_states index of this model (0 .. num_layers), else one line naming the range."""
    n = len(decoder_layers(model))
    if not 0 <= int(layer) <= n:
        raise ConfigError(f"decode.layer={layer}: {type(model).__name__} has hidden_states 0..{n} ({n} layers)")
    return int(layer)


@torch.no_grad()
def hidden_at_layer(model: nn.Module, layer: int, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """hidden_states[layer] of a right-padded batch, [B, T, d]: the input of decoder layer `layer` (0 = the
    embeddings), or after the final norm for layer = num_layers. Layers from `layer` on are skipped: a hook
    on the last needed layer raises with its output, so the forward ends there."""
    layers = decoder_layers(model)
    layer = check_layer(model, layer)
    decoder = model.get_decoder()
    if layer == len(layers):
        return decoder(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state

    def stop_before(_module, args, kwargs):
        raise _Reached(args[0] if args else kwargs["hidden_states"])

    def stop_after(_module, _args, output):
        raise _Reached(output[0] if isinstance(output, tuple) else output)

    handle = (layers[0].register_forward_pre_hook(stop_before, with_kwargs=True) if layer == 0
              else layers[layer - 1].register_forward_hook(stop_after))
    try:
        decoder(input_ids=input_ids, attention_mask=mask, use_cache=False)
    except _Reached as r:
        return r.hidden
    finally:
        handle.remove()
    raise RuntimeError(f"the forward never reached decoder layer {layer}")  # a model that skips layers
