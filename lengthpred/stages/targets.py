"""Where a config's per-prompt targets come from: the one resolver every stage calls.

`targets_from` (conf/config.yaml) decides:
- `generations`: the serving model's own lengths, from the merged generations of `cfg.generate`'s settings
  when present, else (`generate.targets.use_reference`) from the committed reference trace
  `data/reference/<model>/<data>.jsonl`; the statistic is `generate.targets.statistic`;
- `prompts`: the lengths the prompt table records (a trace such as CASTILLO, `data=trace`); the statistic is
  `data.length_stat`;
- `auto` (the default): `prompts` for `data.kind=trace`, `generations` otherwise.

Every frame is `lengthpred.targets.per_prompt`'s (lengths, n_samples, n_capped, capped_frac, target; capped
samples count as the cap) with `attrs` `source`, `statistic` (and `cap`, `settings` for generations);
`lengthpred.targets.target_frame` turns it into the heads' and streams' `y`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from lengthpred import targets as tg
from lengthpred.data import load_prompts
from lengthpred.errors import ConfigError, DataError
from lengthpred.generate import GenerationSettings, load_generations, store
from lengthpred.generate.reference_parts import settings_mismatch
from lengthpred.stages.locations import generations_dir, reference_path

log = logging.getLogger(__name__)
SOURCES = ("auto", "generations", "prompts")
PROMPTS = "(prompt table lengths)"  # `attrs["source"]` of targets read from the prompt table


def targets_from(cfg: Any) -> str:
    """`generations` or `prompts`: where `cfg`'s targets come from (module docstring)."""
    src = str(cfg.targets_from)
    if src not in SOURCES:
        raise ConfigError(f"targets_from={src!r}: use one of {list(SOURCES)}")
    if src == "auto":
        return "prompts" if cfg.data.get("kind") == "trace" else "generations"
    return src


def load_targets(cfg: Any, statistic: str | None = None, *, prompts: Any = None) -> pd.DataFrame:
    """Per-prompt targets of a composed config, indexed by prompt id (module docstring). `prompts`: the
    prompt table when the caller has it loaded already (read from `cfg.data` otherwise, when needed)."""
    if targets_from(cfg) == "prompts":
        statistic = statistic or str(cfg.data.length_stat)
        out = tg.from_records(load_prompts(cfg.data) if prompts is None else prompts, statistic)
        out.attrs.update(source=PROMPTS, statistic=statistic)
        return out
    tcfg = cfg.generate.targets
    statistic = statistic or str(tcfg.statistic)
    settings = GenerationSettings.from_cfg(cfg.generate)
    root = generations_dir(cfg, settings)
    if (root / "merged").is_dir():
        rows = load_generations(root).select_columns(["id", "sample", "length", "finish_reason"]).to_pandas()
        meta, source = settings.hashed(), str(root)
    elif tcfg.use_reference:
        path = reference_path(cfg)
        rows, meta = tg.read_reference(path)
        meta = meta.get("settings", meta)
        source = str(path)
        why = settings_mismatch(meta, settings.hashed())
        if why:
            raise ConfigError(f"{path}: the reference trace's settings differ from the generate config: {why} "
                              "(set generate.* to the trace's settings, or generate targets for yours)")
    else:
        raise DataError(f"no merged generations at {root} and generate.targets.use_reference is false")
    cap = int(meta["max_new_tokens"])
    out = tg.per_prompt(rows, statistic, cap=cap)
    out.attrs.update(source=source, statistic=statistic, cap=cap, settings=dict(meta))
    return out


def request_targets(cfg: Any) -> tuple[dict[str, list[int]], dict[str, int] | None]:
    """Each prompt's sampled lengths (capped ones as the cap) and prompt token count, from `load_targets`;
    counts are None when that source does not record them (the prompt table does not)."""
    targets = load_targets(cfg)
    samples = tg.sample_lengths(targets)
    where = Path(targets.attrs["source"])
    if targets.attrs["source"] == PROMPTS:
        return samples, None
    rows = tg.read_reference(where)[0] if where.is_file() else load_generations(where).to_pandas()
    if "prompt_tokens" not in rows.columns:
        log.warning("%s records no prompt token counts", where)
        return samples, None
    tokens = rows.groupby(rows["id"].astype(str))["prompt_tokens"].first()  # the same for every sample
    return samples, {str(i): int(n) for i, n in tokens.items()}


def prompt_samples(cfg: Any) -> dict[str, list[float]] | None:
    """Sampled lengths recorded in the prompt table (the noise ceiling's input), only when the targets come
    from it: other data configs' recorded lengths are another model's, not the serving model's."""
    if targets_from(cfg) != "prompts":
        return None
    try:
        records = load_prompts(cfg.data)
    except DataError:
        return None
    return tg.samples_from_prompts(records) or None


def export_reference(cfg: Any, *, allow_partial: bool = False) -> Path:
    """Write the merged generations of `cfg.generate` as the committed reference trace (no texts).

    `allow_partial`: before the merge exists, export the prompts whose samples are all written so far,
    marked `partial: true` in the meta line (for a run cut short; its rerun completes it).
    """
    settings = GenerationSettings.from_cfg(cfg.generate)
    root = generations_dir(cfg, settings)
    manifest = store.read_json(root / "manifest.json", {})
    partial = not (root / "merged").is_dir()
    if partial and not allow_partial:
        raise DataError(f"no merged generations at {root}; finish the run or pass allow_partial")
    if partial:
        rows = store.read_parts(root).to_pandas()[list(tg.REFERENCE_COLUMNS)]
        rows = tg.complete_rows(rows, settings.num_samples)
        meta = tg.reference_meta(manifest, rows, partial=True)
    else:
        rows = load_generations(root).select_columns(list(tg.REFERENCE_COLUMNS)).to_pandas()
        meta = tg.reference_meta(manifest)
    return tg.write_reference(rows, reference_path(cfg), meta)
