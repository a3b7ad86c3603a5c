"""The generate stage's library: the serving model's own answers (and so output lengths) for every prompt.

    from lengthpred.generate import GenerationSettings, load_generations
    ds = load_generations(root)     # HF Dataset, one row per (id, sample)

`lengthpred.stages.generate.generate_from_cfg(cfg)` is what scripts/generate.py runs. Modules: `settings`
(what a run is, its hash), `backends` (transformers / vLLM, `make_backend`; imports torch), `runner` (the
resumable sharded run), `store` (part files, merge, `load_generations`), `reference_parts` (the committed
trace's parts), `checks`. This package's own import is light: backends and runner are imported from their
modules, so reading targets never pays for torch.
"""

from __future__ import annotations

from lengthpred.generate import reference_parts, store
from lengthpred.generate.settings import GenerationSettings
from lengthpred.generate.store import load_generations

__all__ = ["GenerationSettings", "load_generations", "reference_parts", "store"]
