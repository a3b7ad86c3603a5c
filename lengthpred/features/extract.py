"""One prefill per prompt → pooled features on disk, streamed batch by batch, resumable and shardable.

`extract_features(settings, model, tokenizer, prompts, out_dir=...) -> Path` writes;
`lengthpred.stages.features.ensure_features(cfg, prompts) -> FeatureSet` finds a config's cache folder by key
or extracts, then loads.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import find_executable_batch_size
from torch import nn

from lengthpred.errors import ConfigError, DataError, ModelError
from lengthpred.features import layout
from lengthpred.features.budget import check_space, human, store_bytes
from lengthpred.features.capture import PrefillCapture, decoder_layers
from lengthpred.features.pooling import (
    attention_importance,
    head_pools,
    pool,
    pool_span,
    pool_weights,
    query_weights,
    token_entropy,
)
from lengthpred.features.settings import (
    HEAD_POOL,
    HEAD_SHARE,
    FeatureSettings,
    cache_key,
    prompts_hash,
    resolve_indices,
)
from lengthpred.features.span import encode_with_span
from lengthpred.features.store import (
    MANIFEST,
    atomic_write_json,
    done_ids,
    shard_parts_dir,
    write_part,
)
from lengthpred.integrity import locked, sweep_stale_temps
from lengthpred.names import FeatureKey, hidden_name
from lengthpred.paths import REPO_ROOT, data_dir
from lengthpred.prompting import encode_prompt

log = logging.getLogger(__name__)
_STORE = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


# -- inputs ------------------------------------------------------------------------------------------
def prompt_records(prompts: Any) -> list[tuple[str, list[dict]]]:
    """(id, messages) pairs from a datasets.Dataset, a list of dicts or a mapping of columns."""
    if hasattr(prompts, "column_names"):
        ids, msgs = prompts["id"], prompts["messages"]
    elif isinstance(prompts, Mapping):
        ids, msgs = prompts["id"], prompts["messages"]
    else:
        rows = list(prompts)
        ids, msgs = [r["id"] for r in rows], [r["messages"] for r in rows]
    ids = [str(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise DataError("prompts: duplicate ids")
    return sorted(zip(ids, [list(m) for m in msgs], strict=True), key=lambda r: r[0])


def model_identity(name: str, dtype: str) -> dict[str, str]:
    return {"name": str(name), "dtype": str(dtype).removeprefix("torch.")}


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        return rev or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# -- planning ----------------------------------------------------------------------------------------
class Plan:
    """Validated, model-resolved extraction plan: which indices, which columns."""

    def __init__(self, settings: FeatureSettings, model: nn.Module):
        n_layers = len(decoder_layers(model))
        self.settings = settings
        self.hs_layers = resolve_indices(settings.layers, n_layers + 1, "layers")
        self.token_layers = resolve_indices(settings.token_layers, n_layers + 1, "token_layers")
        missing = sorted(set(self.token_layers) - set(self.hs_layers))
        if missing:
            raise ConfigError(f"features.token_layers {missing} must also be in features.layers")
        self.attn_layers = (resolve_indices(settings.attn_layers, n_layers, "attn_layers")
                            if settings.needs_attention else [])
        if settings.needs_attention and not self.attn_layers:
            raise ConfigError("features: pools 'attn'/fused need at least one of features.attn_layers")
        head = model.get_output_embeddings()
        if not isinstance(head, nn.Linear):
            raise ModelLacksHead(f"{type(model).__name__} has no linear LM head: entropy needs a causal LM")
        self.head_weight = head.weight.detach().to(_STORE[settings.entropy_dtype])  # no copy when unchanged
        self.head_bias = None if head.bias is None else head.bias.detach()
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.d = model.config.hidden_size
        self.pools = settings.pool_names
        self.weight_pools = tuple(p for p in self.pools if p != HEAD_POOL)  # one weight per token each
        self.n_heads = int(model.config.num_attention_heads)

    def columns(self) -> dict[str, int]:
        cols = {str(FeatureKey(i, p)): self.d for i in self.hs_layers for p in self.weight_pools}
        if self.settings.per_head:
            n = len(self.attn_layers) * self.n_heads
            cols |= {str(FeatureKey(i, HEAD_POOL)): n * self.d for i in self.hs_layers}
            cols[HEAD_SHARE] = n
        cols["n_prompt_tokens"] = 1
        if self.settings.needs_entropy:
            cols["entropy.mean"] = 1
        return cols


class ModelLacksHead(ConfigError):
    """The model cannot give what the settings ask for (no LM head, attention not observable)."""


def plan_batches(lengths: list[int], batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """Indices grouped by similar length (sorted, longest first) so padding stays small; each batch has at
    most `batch_size` prompts and at most `max_batch_tokens` padded tokens. Deterministic for given inputs."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches, cur = [], []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]  # first in a batch is its longest
        if cur and (len(cur) >= batch_size or width * (len(cur) + 1) > max_batch_tokens):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def collate(seqs: list[list[int]], pad_id: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for b, s in enumerate(seqs):
        sl = slice(t - len(s), t) if side == "left" else slice(0, len(s))
        ids[b, sl] = torch.tensor(s, dtype=torch.long)
        mask[b, sl] = 1
    return ids, mask


def collate_span(spans: list[list[bool]], side: str) -> torch.Tensor:
    """Per-token span flags padded like `collate` pads the ids: [B, T] bool."""
    t = max(len(s) for s in spans)
    out = torch.zeros((len(spans), t), dtype=torch.bool)
    for b, s in enumerate(spans):
        out[b, slice(t - len(s), t) if side == "left" else slice(0, len(s))] = torch.tensor(s, dtype=torch.bool)
    return out


def encode(tokenizer: Any, messages: list[dict], settings: FeatureSettings, max_tokens: int | None,
           prompt_id: str) -> tuple[list[int], list[bool]]:
    """The prompt's ids and, per id, whether the pools (all but `last`) range over it (`features.span`)."""
    kw = dict(max_prompt_tokens=max_tokens, overflow=settings.overflow, prompt_id=prompt_id)
    if settings.span == "content" and settings.uses_span:
        return encode_with_span(tokenizer, messages, **kw)
    ids = encode_prompt(tokenizer, messages, **kw)
    return ids, [not (settings.drop_sink and j == 0) for j in range(len(ids))]


# -- the forward -------------------------------------------------------------------------------------
@torch.no_grad()
def prefill_scores(model: nn.Module, plan: Plan, capture: PrefillCapture, input_ids: torch.Tensor,
                   mask: torch.Tensor, attn_norms: tuple[str, ...] | None = None,
                   ) -> tuple[dict[int, torch.Tensor], torch.Tensor | None, dict[str, torch.Tensor]]:
    """One forward → hidden states {hidden_states index: [B, T, d]}, next-token entropy [B, T] (None if not
    needed) and attention importance [B, T] per normalisation in `attn_norms` (default: `features.attn_norm`;
    empty if not needed)."""
    s = plan.settings
    norms = attn_norms or (s.attn_norm,)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift positions
    qw = torch.stack([query_weights(mask, n) for n in norms], dim=1)  # [B, R, T]
    capture.begin(mask, qw if plan.attn_layers else None)
    out = model.get_decoder()(input_ids=input_ids, attention_mask=mask, position_ids=position_ids,
                              use_cache=False)
    final = out.last_hidden_state  # [B, T, d] = hidden_states[num_layers], after the final norm
    hidden = dict(capture.hidden)  # on the inputs' device (under a device map the capture moves them there)
    hidden[len(capture.layers)] = final.to(mask.device)
    if plan.attn_layers and capture.n_attn_calls != len(plan.attn_layers):
        raise ModelLacksHead(f"{type(model).__name__}: attention importance saw {capture.n_attn_calls} of "
                             f"{len(plan.attn_layers)} attention layers; set features.attn_layers=[] and drop "
                             f"the attn/fused pools")
    head = plan.head_weight.device  # the LM head's: the last GPU under a device map
    entropy = (token_entropy(final.to(head), mask.to(head), plan.head_weight, plan.head_bias, s.entropy_chunk,
                             plan.softcap).to(mask.device)
               if s.needs_entropy else None)  # [B, T]
    importance = {} if capture.received is None else {
        n: attention_importance(capture.received[:, k], mask, n) for k, n in enumerate(norms)}  # [B, T] each
    if capture.per_head and capture.received_heads is not None:  # [B, L·H, T] under the store's own norm
        importance[HEAD_POOL] = attention_importance(capture.received_heads[:, norms.index(s.attn_norm)], mask,
                                                     s.attn_norm)
    return hidden, entropy, importance


@torch.no_grad()
def extract_batch(model: nn.Module, plan: Plan, capture: PrefillCapture, input_ids: torch.Tensor,
                  mask: torch.Tensor, span: torch.Tensor | None = None,
                  ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One forward → pooled columns {name: [B, d] float32} and the token-level tensors: `hs.L{l}` [B, T, d]
    for each of token_layers, plus `entropy`, `attn` (attention importance) and `span` [B, T] when computed.
    `span` [B, T]: the tokens the pools except `last` range over (None: every real token)."""
    s = plan.settings
    device = next(model.parameters()).device
    input_ids, mask = input_ids.to(device), mask.to(device)
    span = pool_span(mask, None if span is None else span.to(device))
    hidden, entropy, scores = prefill_scores(model, plan, capture, input_ids, mask)
    importance = scores.get(s.attn_norm)
    weights = pool_weights(mask, tuple(p for p in s.pools if p != HEAD_POOL), s.fused, entropy=entropy,
                           importance=importance, span=span, fuse_on=s.fuse_on)
    w = torch.stack([weights[p] for p in plan.weight_pools], dim=1)  # [B, K, T]
    cols: dict[str, torch.Tensor] = {}
    for layer in plan.hs_layers:
        pooled = pool(hidden[layer], w, mask)  # [B, K, d]
        for k, p in enumerate(plan.weight_pools):
            cols[str(FeatureKey(layer, p))] = pooled[:, k]
    if s.per_head:
        for layer in plan.hs_layers:
            per_head, share = head_pools(scores[HEAD_POOL], hidden[layer], span)  # [B, L·H, d], [B, L·H]
            cols[str(FeatureKey(layer, HEAD_POOL))] = per_head.flatten(1)
        cols[HEAD_SHARE] = share
    n = mask.sum(-1)
    cols["n_prompt_tokens"] = n.float()[:, None]
    if entropy is not None:
        cols["entropy.mean"] = ((entropy * span).sum(-1) / span.sum(-1).clamp(min=1))[:, None]
    tokens: dict[str, torch.Tensor] = {hidden_name(i): hidden[i] for i in plan.token_layers}
    if tokens:  # what a head that learns its fusion weights needs beside the states
        if entropy is not None:
            tokens["entropy"] = entropy
        if importance is not None:
            tokens["attn"] = importance
        tokens["span"] = span
    return cols, tokens


def _check_finite(cols: dict[str, torch.Tensor], ids: list[str], dtype: str) -> None:
    for name, v in cols.items():
        bad = ~torch.isfinite(v).all(dim=-1)
        if bad.any():
            which = [ids[i] for i in bad.nonzero().flatten().tolist()]
            hint = " (float16 overflow? set features.dtype=bfloat16 or float32)" if dtype == "float16" else ""
            raise DataError(f"non-finite feature {name} for prompt {which[0]}" +
                            (f" and {len(which) - 1} more" if len(which) > 1 else "") + hint)


def _tokens_file(tokens: dict[str, torch.Tensor], mask: torch.Tensor, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    real = mask.bool()
    # row-major: prompt after prompt; the per-token scalars stay float32 (tiny, and entropy needs the range)
    kinds = {"span": torch.uint8}
    out = {k: v[real].to(dtype if FeatureKey.is_key(k) else kinds.get(k, torch.float32)).cpu()
           for k, v in tokens.items()}
    out["offsets"] = torch.cat([torch.zeros(1, dtype=torch.long), mask.sum(-1).cumsum(0).cpu()])
    return out


def extract_features(
    settings: FeatureSettings,
    model: nn.Module,
    tokenizer: Any,
    prompts: Any,
    *,
    out_dir: str | Path | None = None,
    model_name: str | None = None,
    shard: tuple[int, int] = (0, 1),
    progress: bool = True,
    source: str | None = None,
) -> Path:
    """Extract features of `prompts` into `out_dir` (default: the cache folder for `settings`) and return it.

    Batches are written as they finish, into this shard's own folder; a rerun skips prompts already stored, and
    shard (i, n) handles prompts i, i+n, ... of the id-sorted set (`lengthpred.stages.features` gives a config's
    settings and folder). Before the first forward: the store's writer is claimed or checked (its shard count,
    model, `source` checkpoint and layers: `lengthpred.features.layout`), and its size is estimated, printed and
    checked against the free disk space. A forward that runs out of memory halves the padded tokens per forward
    (and the prompts per batch) and goes on, saying so (`accelerate`'s `find_executable_batch_size`).
    """
    model_name = model_name or getattr(model.config, "_name_or_path", None) or type(model).__name__
    records = prompt_records(prompts)
    if settings.limit:
        records = records[: settings.limit]
    if not records:
        raise DataError("no prompts to extract features for")
    i, n = shard
    if n > len(records):
        raise ConfigError(f"shard={i}/{n} but the set has only {len(records)} prompts: use at most {len(records)} "
                          "shards")
    plan = Plan(settings, model)  # validates layers / attention / head before any work
    dtype = next(model.parameters()).dtype
    ident = model_identity(model_name, dtype)
    p_hash = prompts_hash(records)
    key = cache_key(settings, ident, p_hash)
    if out_dir is None:
        out_dir = data_dir() / "features" / Path(str(model_name)).name / key
    root = Path(out_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create the feature store at {root}: {e.strerror}") from None
    _check_same_writer(root, ident, plan.hs_layers)
    layout.claim(root, {"shards": n, "model": ident, "source": source, "layers": plan.hs_layers})
    # one writer per (store, shard): a second identical extraction waits, then finds every part written
    with locked(root / f".lock-{i}of{n}"):
        sweep_stale_temps(shard_parts_dir(root, shard))
        atomic_write_json(root / MANIFEST, {
            "model": ident, "cache_key": key, "prompts_hash": p_hash, "git_revision": git_revision(),
            "settings": settings.hashed(), "layers": plan.hs_layers, "attn_layers": plan.attn_layers,
            "token_layers": plan.token_layers, "poolings": list(plan.pools), "fused": list(settings.fused),
            "dtype": settings.dtype, "columns": plan.columns(), "ids": [r[0] for r in records],
            "padding_side": settings.padding_side, "pooling": settings.pooling,
            **({"n_attention_heads": plan.n_heads} if settings.per_head else {}),
        })
        encoded = _encode_shard(records[i::n], tokenizer, settings, model, root, shard)
        done = done_ids(root)
        todo = [e for e in encoded if e[0] not in done]
        need = store_bytes(plan.columns(), settings.dtype, len(todo), token_layers=len(plan.token_layers),
                           d=plan.d, n_tokens=sum(len(e[1]) for e in todo))
        whole = store_bytes(plan.columns(), settings.dtype, len(records), token_layers=len(plan.token_layers),
                            d=plan.d, n_tokens=sum(len(e[1]) for e in encoded) * n)
        print(f"features: about {human(whole)} for {len(records)} prompts ({len(plan.columns())} columns, "
              f"{settings.dtype}); shard {i}/{n} writes {human(need)} more for {len(todo)} prompts → {root}",
              flush=True)
        # every shard writes into this one folder, so the disk must hold what all of them have left, not this
        # shard's part alone (other shards' prompts are not encoded here: their tokens are estimated from these)
        left = sum(r[0] not in done for r in records)
        per_prompt = sum(len(e[1]) for e in encoded) / max(len(encoded), 1)
        check_space(root, max(need, store_bytes(plan.columns(), settings.dtype, left,
                                                token_layers=len(plan.token_layers), d=plan.d,
                                                n_tokens=round(per_prompt * left))))
        runner = _BatchRunner(model, plan, tokenizer, settings, root, shard, progress)
        find_executable_batch_size(runner, starting_batch_size=settings.max_batch_tokens,
                                   reduce_batch_size_fn=runner.halve)(encoded)
    return root


def _check_same_writer(root: Path, ident: dict[str, str], layers: list[int]) -> None:
    """A store whose manifest names another model or layer set is refused before any work."""
    try:
        old = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return
    for what, have, want in (("model", old.get("model"), ident), ("layers", old.get("layers"), layers)):
        if have is not None and have != want:
            raise ConfigError(f"feature store {root} was written with {what} {have}, this run has {want}: give this "
                              f"run its own folder (another model.name or out_dir), or remove that one")


def _encode_shard(mine: list[tuple[str, list[dict]]], tokenizer: Any, settings: FeatureSettings, model: nn.Module,
                  root: Path, shard: tuple[int, int]) -> list[tuple[str, list[int], list[bool]]]:
    """(id, token ids, span flags) of this shard's prompts; empty or over-long ones listed in `skipped-*.json`,
    cut ones in `truncated-*.json`."""
    i, n = shard
    max_tokens = settings.max_prompt_tokens or getattr(model.config, "max_position_embeddings", None)
    encoded, skipped, truncated = [], {}, {}
    for pid, messages in mine:
        try:
            encoded.append((pid, *encode(tokenizer, messages, settings, max_tokens, pid)))
        except DataError as e:  # empty, over-long under overflow=reject, content not found: skipped and listed
            skipped[pid] = str(e)
            continue
        if max_tokens and len(encoded[-1][1]) >= max_tokens:  # at the budget: cut, or exactly that long?
            full = len(encode_prompt(tokenizer, messages, prompt_id=pid))
            if full > max_tokens:
                truncated[pid] = full
    atomic_write_json(root / f"skipped-{i}of{n}.json", skipped)
    atomic_write_json(root / f"truncated-{i}of{n}.json", truncated)
    if skipped:
        log.warning("%d prompts skipped (empty or over-long); listed in %s", len(skipped), root)
    if truncated:
        log.warning("%d prompts cut to %d tokens (features.overflow=truncate; `reject` leaves them out), "
                    "longest %d; listed in %s", len(truncated), max_tokens, max(truncated.values()), root)
    return encoded


class _BatchRunner:
    """The forwards of one shard at a token budget (`__call__(budget, encoded)`); after an out-of-memory error
    `halve` gives the next budget and the call resumes from the parts written so far."""

    def __init__(self, model: nn.Module, plan: Plan, tokenizer: Any, settings: FeatureSettings, root: Path,
                 shard: tuple[int, int], progress: bool) -> None:
        self.model, self.plan, self.settings, self.root, self.shard = model, plan, settings, root, shard
        self.progress = progress
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.budget, self.batch_size = settings.max_batch_tokens, settings.batch_size

    def halve(self) -> int:
        if self.budget <= 1 and self.batch_size <= 1:
            raise ModelError("out of memory with one prompt of one token per forward: use a smaller model, "
                             "another device, or model.device_map=auto to spread it over GPUs")
        old = self.budget
        self.budget, self.batch_size = max(1, self.budget // 2), max(1, self.batch_size // 2)
        log.warning("features: out of memory at %d padded tokens per forward; halving to %d tokens and %d prompts "
                    "per batch (features.max_batch_tokens / batch_size) and resuming", old, self.budget,
                    self.batch_size)
        print(f"features: out of memory at {old} tokens per forward, retrying at {self.budget}", flush=True)
        return self.budget

    def __call__(self, budget: int, encoded: list[tuple[str, list[int], list[bool]]]) -> None:
        s, plan, model, root = self.settings, self.plan, self.model, self.root
        done = done_ids(root)
        left = [e for e in encoded if e[0] not in done]  # batches of what is missing only: never a prompt twice
        todo = [[left[j] for j in b] for b in plan_batches([len(e[1]) for e in left], self.batch_size, budget)]
        store = _STORE[s.dtype]
        from tqdm.auto import tqdm

        i, n = self.shard
        t0, n_tok = time.perf_counter(), 0
        bar = tqdm(total=sum(len(b) for b in todo), desc=f"features {i}/{n}", unit="prompt", disable=not self.progress)
        with PrefillCapture(model, plan.hs_layers, plan.attn_layers, s.attn_chunk, per_head=s.per_head) as capture:
            if todo and plan.attn_layers:  # a 2-token probe: an attention the model cannot give fails here
                extract_batch(model, plan, capture, *collate([todo[0][0][1][:2]], self.pad_id, "right"))
            for batch in todo:
                ids = [e[0] for e in batch]
                input_ids, mask = collate([e[1] for e in batch], self.pad_id, s.padding_side)
                span = collate_span([e[2] for e in batch], s.padding_side)
                cols, tokens = extract_batch(model, plan, capture, input_ids, mask, span)
                _check_finite(cols, ids, s.dtype)
                cols = {k: v.to(store).cpu() for k, v in cols.items()}
                _check_finite(cols, ids, s.dtype)
                write_part(root, ids, cols, _tokens_file(tokens, mask, store) if tokens else None, shard=self.shard)
                n_tok += int(mask.sum())
                bar.update(len(batch))
        bar.close()
        if todo:
            dt = time.perf_counter() - t0
            log.info("features: %d prompts, %d tokens in %.1f s (%.1f prompts/s, %.0f tokens/s) → %s",
                     sum(len(b) for b in todo), n_tok, dt, sum(len(b) for b in todo) / dt, n_tok / dt, root)


def iter_columns(names: Iterable[str]) -> list[tuple[int, str]]:
    """(layer, pool) of each `hs.L{l}.{pool}` name (others skipped)."""
    keys = [FeatureKey.parse(n) for n in names if FeatureKey.is_key(n)]
    return [(k.layer, k.pool) for k in keys]
