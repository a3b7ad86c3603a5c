"""The readout's input in the request path: one prompt's prefill on the embedded model, one layer's
last-token hidden state (`hs.L{layer}.last`, as `lengthpred.features` names it), on the calling thread.

`PrefillFeaturizer` hooks only that layer (`lengthpred.features.capture.PrefillCapture`) and runs the
decoder without the LM head. `cached_rows` computes rows for many prompts once and keeps them in an .npz,
for the readout's warm start and for runs on stored features.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lengthpred.errors import ConfigError
from lengthpred.features.capture import PrefillCapture, decoder_layers

log = logging.getLogger(__name__)
# vLLM's CPU worker replaces torch.set_num_threads with a no-op once it binds its threads (in-process, for
# every thread): keep the real one, taken when this module is imported (before the engine starts)
_set_num_threads = torch.set_num_threads


class PrefillFeaturizer:
    """`f(token_ids) -> [d] float64`: hidden_states[layer] at the prompt's last token (0 = embeddings,
    num_layers = after the final norm). `threads` sets torch's intra-op threads on the first calling thread."""

    def __init__(self, model: torch.nn.Module, layer: int, *, threads: int | None = 1) -> None:
        n = len(decoder_layers(model))
        if not 0 <= layer <= n:
            raise ConfigError(f"serve.predictor.layer={layer}: the model has hidden_states 0..{n}")
        self.model, self.layer, self.threads, self.n_layers = model, layer, threads, n
        self.device = next(model.parameters()).device
        self._lock = threading.Lock()  # one forward at a time (the hooks are shared)
        self._threads_set: set[int] = set()

    @torch.no_grad()
    def __call__(self, token_ids: Sequence[int]) -> np.ndarray:
        if self.threads and threading.get_ident() not in self._threads_set:
            _set_num_threads(int(self.threads))  # this thread's OpenMP team only
            self._threads_set.add(threading.get_ident())
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)  # [1, T], on the model's device
        mask = torch.ones_like(ids)
        with self._lock, PrefillCapture(self.model, [self.layer], []) as cap:
            cap.begin(mask)
            out = self.model.get_decoder()(input_ids=ids, attention_mask=mask, use_cache=False)
            h = out.last_hidden_state if self.layer == self.n_layers else cap.hidden[self.layer]  # [1, T, d]
            return h[0, -1].double().cpu().numpy()


def cached_rows(featurizer: PrefillFeaturizer, ids: Sequence[str], token_ids: Sequence[Sequence[int]],
                path: str | Path) -> dict[str, np.ndarray]:
    """Rows for every id, computing (and adding to the .npz at `path`) only those not stored yet."""
    path = Path(path)
    have: dict[str, np.ndarray] = {}
    if path.is_file():
        with np.load(path) as z:
            have = {k: z[k] for k in z.files}
    todo = [(i, t) for i, t in zip(ids, token_ids, strict=True) if i not in have]
    if todo:
        log.info("prefill features for %d prompts (layer %d) -> %s", len(todo), featurizer.layer, path)
        for i, t in todo:
            have[i] = featurizer(t)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + ".tmp.npz")
        np.savez(tmp, **have)
        tmp.replace(path)
    return {i: have[i] for i in ids}


class CachedFeaturizer:
    """A featurizer with a file cache of the rows of known prompts (`cached_rows`)."""

    def __init__(self, featurizer: Any, path: Path) -> None:
        self.f, self.path = featurizer, path

    def __call__(self, token_ids: list[int]) -> np.ndarray:
        return self.f(token_ids)

    def cached(self, ids: list[str], token_ids: list[list[int]]) -> dict[str, np.ndarray]:
        return cached_rows(self.f, ids, token_ids, self.path)
