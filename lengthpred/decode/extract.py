"""Decode-time states by teacher-forced prefill of prompt + sampled answer, streamed to disk in parts.

For an answer of L tokens, the state after t tokens generated (0 <= t < L: the request still runs) is the
chosen layer's hidden state at the position whose output predicts answer token t: the prompt's last token for
t = 0, answer token t-1 otherwise. One forward over prompt + answer[:t_last] gives every checkpoint at once.
The target is the remaining length L - t (exact under the generation cap; `capped` says the cap ended it).

Layout of `data/decode/<model>/<cache-key>/` (the prefill store's part format, lengthpred.features.store):
  manifest.json                 model, settings, generation folder, ids, hashes, git revision
  parts/<h>.safetensors         per answer: `length`, `capped`, `prompt_tokens` [b]; ids in the metadata
  parts/<h>.tokens.safetensors  per checkpoint: `hs.L{l}` [rows, d], `t` [rows]; `offsets` [b+1]
  parts/<name>.sha256           checksums (a damaged part is moved aside and recomputed on resume)
  skipped-<i>of<n>.json         ids left out (no checkpoint: an empty answer), with the reason
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lengthpred.decode.answers import Answer, answers_hash
from lengthpred.decode.forward import check_layer, hidden_at_layer
from lengthpred.decode.settings import DecodeSettings, checkpoints
from lengthpred.errors import DataError
from lengthpred.features.extract import collate, git_revision, model_identity, plan_batches, prompt_records
from lengthpred.features.settings import prompts_hash
from lengthpred.features.store import MANIFEST, atomic_write_json, done_ids, shard_parts_dir, write_part
from lengthpred.integrity import locked, sweep_stale_temps
from lengthpred.names import hidden_name
from lengthpred.prompting import encode_prompt

log = logging.getLogger(__name__)
_STORE = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def decode_key(settings: DecodeSettings, model_id: Mapping[str, Any], p_hash: str, a_hash: str,
               max_prompt_tokens: int | None) -> str:
    """16 hex chars over model identity, stored settings, prompts, answers and the prompt budget."""
    blob = json.dumps({"model": dict(model_id), "decode": settings.hashed(), "prompts": p_hash, "answers": a_hash,
                       "max_prompt_tokens": max_prompt_tokens}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def selected_ids(prompts: Any, answers: Mapping[str, Answer], limit: int | None) -> tuple[list, list[str]]:
    """(id-sorted (id, messages) records that have an answer, prompt ids without one)."""
    records = prompt_records(prompts)
    missing = [pid for pid, _ in records if pid not in answers]
    records = [r for r in records if r[0] in answers]
    if limit:
        records = records[:limit]
    if not records:
        raise DataError("no prompt has a sampled answer: nothing to extract decode states for")
    return records, missing


def encode_answer(tokenizer: Any, messages: list, answer: Answer, max_prompt_tokens: int | None) -> list[int]:
    """The prompt ids generation used (re-encoded under its budget; truncated the same way), checked
    against the count it stored."""
    ids = encode_prompt(tokenizer, messages, max_prompt_tokens=max_prompt_tokens, overflow="truncate",
                        prompt_id=answer.id)
    if answer.prompt_tokens is not None and len(ids) != answer.prompt_tokens:
        raise DataError(f"answer {answer.id}: its prompt encodes to {len(ids)} tokens here but generation stored "
                        f"{answer.prompt_tokens} (another template or prompt budget?)")
    return ids


def extract_decode(
    settings: DecodeSettings,
    model: nn.Module,
    tokenizer: Any,
    prompts: Any,
    answers: Mapping[str, Answer],
    *,
    out_dir: str | Path,
    model_name: str | None = None,
    max_prompt_tokens: int | None = None,
    shard: tuple[int, int] = (0, 1),
    source: str | None = None,
    progress: bool = True,
) -> Path:
    """Write the decode states of every answered prompt of shard (i, n) into `out_dir` and return it; a
    rerun skips answers already stored. `max_prompt_tokens`: the generation's prompt budget."""
    layer = check_layer(model, settings.layer)  # a layer the model lacks fails before any work
    model_name = model_name or getattr(model.config, "_name_or_path", None) or type(model).__name__
    records, missing = selected_ids(prompts, answers, settings.limit)
    if missing:
        log.info("decode: %d prompts have no answer (rejected by generation?) and are left out", len(missing))
    ident = model_identity(model_name, next(model.parameters()).dtype)
    ids = [r[0] for r in records]
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    i, n = shard
    with locked(root / f".lock-{i}of{n}"):
        sweep_stale_temps(shard_parts_dir(root, shard))
        atomic_write_json(root / MANIFEST, {
            "model": ident, "settings": settings.hashed(), "layer": layer, "ids": ids,
            "prompts_hash": prompts_hash(records), "answers_hash": answers_hash(answers, ids),
            "max_prompt_tokens": max_prompt_tokens, "source": source, "git_revision": git_revision(),
            "target": "remaining = length - t; capped answers: remaining under the generation cap",
        })
        mine, skipped, done = records[i::n], {}, done_ids(root)
        todo = []  # (id, sequence, checkpoints)
        for pid, messages in mine:
            a = answers[pid]
            ts = checkpoints(a.length, settings.every, settings.also_at, settings.max_t)
            if not len(ts):
                skipped[pid] = "empty answer: no checkpoint while it runs"
                continue
            if pid in done:
                continue
            p = encode_answer(tokenizer, messages, a, max_prompt_tokens)
            todo.append((pid, p + list(a.token_ids[: int(ts[-1])]), len(p) - 1 + ts))
        atomic_write_json(root / f"skipped-{i}of{n}.json", skipped)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        batches = plan_batches([len(s) for _, s, _ in todo], settings.batch_size, settings.max_batch_tokens)
        device, store = next(model.parameters()).device, _STORE[settings.dtype]
        from tqdm.auto import tqdm

        t0, n_tok = time.perf_counter(), 0
        for b in tqdm(batches, desc=f"decode states {i}/{n}", unit="batch", disable=not progress):
            rows = [todo[j] for j in b]
            input_ids, mask = collate([s for _, s, _ in rows], pad, "right")
            h = hidden_at_layer(model, layer, input_ids.to(device), mask.to(device))
            states = torch.cat([h[k, torch.as_tensor(pos, device=h.device)] for k, (_, _, pos) in enumerate(rows)])
            if not torch.isfinite(states).all():
                raise DataError(f"non-finite decode state in a batch starting with answer {rows[0][0]}")
            pids = [r[0] for r in rows]
            lens = [answers[p].length for p in pids]
            counts = torch.tensor([len(r[2]) for r in rows])
            cols = {"length": torch.tensor(lens, dtype=torch.int32),
                    "capped": torch.tensor([answers[p].capped for p in pids], dtype=torch.uint8),
                    "prompt_tokens": torch.tensor([int(r[2][0]) + 1 for r in rows], dtype=torch.int32)}
            tokens = {hidden_name(layer): states.to(store).cpu(),
                      "t": torch.cat([torch.as_tensor(r[2] - r[2][0]) for r in rows]).to(torch.int32),
                      "offsets": torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])}
            write_part(root, pids, cols, tokens, shard=shard)
            n_tok += int(mask.sum())
        if batches:
            dt = time.perf_counter() - t0
            log.info("decode states: %d answers, %d tokens through %d layers in %.1f s (%.0f tokens/s) → %s",
                     len(todo), n_tok, layer, dt, n_tok / dt, root)
    return root
