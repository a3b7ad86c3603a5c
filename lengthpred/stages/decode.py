"""The decode stages (issue 27): `run_extract_decode` (scripts/extract_decode.py) stores the serving model's states
at checkpoints of its sampled answers; `run_decode_curve` (scripts/decode_curve.py) fits remaining-length heads on
them and writes the refinement curve (csv, markdown table, figure) into the run folder; `run_decode_online`
(scripts/decode_online.py) adapts the decode readout by RLS across the cross-domain pairs.

Store: `<data_dir>/decode/<model>/<key>/`, the key over the model identity, `decode.*` fields that change the
states, the prompts, the answers' token ids and the generation's prompt budget (lengthpred.decode.extract).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from lengthpred.artefacts import DECODE_CHECKPOINTS, DECODE_CHOSEN
from lengthpred.data import load_prompts, load_splits
from lengthpred.decode.answers import Answer, answers_hash, select_answers
from lengthpred.decode.checkpoints import best_decode_head, checkpoint_frame
from lengthpred.decode.extract import decode_key, extract_decode, selected_ids
from lengthpred.decode.online import adaptation, pair_ids, plot_adaptation
from lengthpred.decode.plots import plot_curve
from lengthpred.decode.readout import fit_curve
from lengthpred.decode.score import markdown_table, score_curve
from lengthpred.decode.settings import DecodeSettings
from lengthpred.decode.store import DecodeSet, load_decode
from lengthpred.errors import DataError
from lengthpred.features.extract import model_identity
from lengthpred.features.settings import prompts_hash
from lengthpred.generate.store import load_generations, read_json, read_parts
from lengthpred.heads.assemble import indomain_ids
from lengthpred.paths import resolve
from lengthpred.stages.distributed import launcher_shard, process_group
from lengthpred.stages.locations import data_dir, generations_dir
from lengthpred.stages.model import load_model, model_device, model_dtype
from lengthpred.stages.outputs import declare_outputs
from lengthpred.stages.shards import parse_shard

log = logging.getLogger(__name__)


def decode_settings(cfg: Any) -> DecodeSettings:
    return DecodeSettings.from_cfg(OmegaConf.to_container(cfg.decode, resolve=True))


def answers_root(cfg: Any) -> Path:
    """The generations folder the answers come from: `decode.generations`, else this config's generate settings'."""
    g = cfg.decode.get("generations")
    return resolve(str(g)) if g else generations_dir(cfg)


def generation_budget(root: Path) -> int | None:
    """The prompt budget generation encoded under (its settings, else max_context - max_new_tokens)."""
    m = read_json(root / "manifest.json", {}) or {}
    s = m.get("settings") or {}
    if s.get("max_prompt_tokens"):
        return int(s["max_prompt_tokens"])
    if m.get("max_context") and s.get("max_new_tokens"):
        return int(m["max_context"]) - int(s["max_new_tokens"])
    return None


def load_answers(cfg: Any, settings: DecodeSettings) -> tuple[dict[str, Answer], Path, int | None]:
    """The answers of the merged generations, or with `decode.partial` of every part file written so far (a
    generation still running or cut short: the store's key then changes as more answers arrive)."""
    root = answers_root(cfg)
    if cfg.decode.get("partial"):
        table = read_parts(root)
        log.warning("decode.partial: %d answers from the part files of %s (merged or not)",
                    table.num_rows, root)
        return select_answers(table.to_pylist(), settings.sample), root, generation_budget(root)
    return select_answers(load_generations(root), settings.sample), root, generation_budget(root)


def decode_dir(cfg: Any, prompts: Any, answers: dict[str, Answer], settings: DecodeSettings,
               budget: int | None) -> Path:
    records, _ = selected_ids(prompts, answers, settings.limit)
    ids = [r[0] for r in records]
    key = decode_key(settings, model_identity(cfg.model.name, model_dtype(cfg)), prompts_hash(records),
                     answers_hash(answers, ids), budget)
    return data_dir(cfg) / "decode" / str(cfg.model.name) / key


def run_extract_decode(cfg: DictConfig, out: str | Path) -> Path:
    """The extract_decode stage (`out`: its run folder; the store it writes under data/ is declared in the config's run folder, `paths.output_dir`, which is `out` when a script calls it): the states of this config's answers (`shard`, or the launcher's rank); prints the store's size once complete."""
    settings = decode_settings(cfg)  # a bad decode config fails before the model or data load
    device = model_device(cfg)  # a bad device (or LOCAL_RANK) too
    with open_dict(cfg):
        cfg.shard = launcher_shard(cfg)
    prompts = load_prompts(cfg.data)
    answers, source, budget = load_answers(cfg, settings)
    root = decode_dir(cfg, prompts, answers, settings, budget)
    with process_group(device) as group:
        model, tokenizer = load_model(cfg)  # on cfg.device, this process's GPU under a launcher (LOCAL_RANK)
        with torch.inference_mode():
            extract_decode(settings, model, tokenizer, prompts, answers, out_dir=root,
                           model_name=str(cfg.model.name), max_prompt_tokens=budget, shard=parse_shard(cfg.shard),
                           source=str(source))
        declare_outputs(cfg, root)
        group.barrier()
        if not group.is_main:
            return root
    i, n = parse_shard(cfg.shard)
    if n == 1 or group.size > 1:
        ds = load_decode(root)
        print(f"{root}  ({len(ds.ids)} answers, {len(ds.t)} checkpoints)")
    else:
        print(f"{root}  (shard {i}/{n} done; load_decode checks completeness once all shards ran)")
    return root


def find_decode(cfg: Any) -> DecodeSet:
    """This config's complete decode store (one line naming the extraction when it is missing)."""
    settings = decode_settings(cfg)
    prompts = load_prompts(cfg.data)
    answers, _, budget = load_answers(cfg, settings)
    root = decode_dir(cfg, prompts, answers, settings, budget)
    if not (root / "manifest.json").is_file():
        raise DataError(f"no decode states at {root}: run scripts/extract_decode.py with the same overrides first")
    return load_decode(root)


def run_decode_curve(cfg: DictConfig, out: str | Path) -> Path:
    """Fit on train, choose on val, score on test; write into `out` curve.csv, curve.md, curve.png, chosen.json and
    checkpoints.parquet (every test answer's predictions at each checkpoint: scripts/simulate_refined.py)."""
    c = OmegaConf.to_container(cfg.decode.curve, resolve=True)
    ds = find_decode(cfg)
    ids = indomain_ids(load_splits(cfg.data))
    curve = fit_curve(ds, ids, c["heads"], c["at"], floor=float(c["floor"]), n_folds=int(c["n_folds"]),
                      prompt_select=c.get("prompt_select"))
    df = score_curve(curve, c["at"], n_boot=int(c["n_boot"]), seed=int(cfg.seed), confidence=float(c["confidence"]))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "curve.csv", index=False)
    title = (f"{cfg.model.name} on {cfg.data.name}: remaining length from layer {ds.manifest['layer']}, "
             f"k={ds.manifest['settings']['every']}, {len(curve.y)} test checkpoints")
    (out / "curve.md").write_text(f"{title}\n\n" + markdown_table(df))
    plot_curve(df, out / "curve.png", title)
    every = int(ds.manifest["settings"]["every"])
    checkpoint_frame(ds, curve, every).to_parquet(out / DECODE_CHECKPOINTS, index=False)
    (out / DECODE_CHOSEN).write_text(json.dumps({"store": str(ds.root), "every": every,
                                                 "max_t": ds.manifest["settings"].get("max_t"),
                                                 "best": best_decode_head(curve.chosen), **curve.chosen},
                                                indent=1, default=str))
    print(markdown_table(df))
    print(f"→ {out}")
    return out


def run_decode_online(cfg: DictConfig, out: str | Path) -> Path:
    """RLS adaptation of the decode readout per cross-domain pair of splits.json; writes into `out` online.csv (every pair's
    curve), online.md (the mean over pairs at the start and the end of the stream) and online.png."""
    c = OmegaConf.to_container(cfg.decode.online, resolve=True)
    at = list(cfg.decode.curve.at)
    ds = find_decode(cfg)
    splits = load_splits(cfg.data)
    pairs = [p for p in splits.get("cross") or [] if not c.get("pairs") or p["name"] in c["pairs"]]
    if not pairs:
        raise DataError("decode online: splits.json has no cross-domain pairs (or none of decode.online.pairs)")
    frames = []
    for p in pairs:
        source, stream, test = pair_ids(splits, p, c["stream_parts"])
        df = adaptation(ds, source, stream, test, alphas=c["alphas"], forgetting=c["forgetting"], at=at,
                        record_every=int(c["record_every"]), seed=int(cfg.seed))
        frames.append(df.assign(pair=p["name"]))
        log.info("decode online %s: %s", p["name"], df[df["n_seen"] == df["n_seen"].max()].to_dict("records"))
    df = pd.concat(frames, ignore_index=True)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "online.csv", index=False)
    last = df.groupby("pair")["n_seen"].transform("max") == df["n_seen"]
    summary = pd.concat([df[df["n_seen"] == 0].assign(when="start"), df[last].assign(when="end")])
    table = summary.groupby(["head", "when"], sort=False)[["spearman", "mae"]].agg(["mean", "std"])
    title = f"{cfg.model.name} on {cfg.data.name}: decode readout adapted by RLS over {len(pairs)} cross pairs"
    lines = ["| head | stream | mean-over-t Spearman, mean (sd over pairs) | MAE, mean (sd) |", "|---|---|---|---|"]
    lines += [f"| {h} | {w} | {r[('spearman', 'mean')]:.3f} ({r[('spearman', 'std')]:.3f}) | "
              f"{r[('mae', 'mean')]:.1f} ({r[('mae', 'std')]:.1f}) |" for (h, w), r in table.iterrows()]
    (out / "online.md").write_text(f"{title}\n\n" + "\n".join(lines) + "\n")
    plot_adaptation(df, out / "online.png", title)
    print(table.to_string())
    print(f"→ {out}")
    return out
