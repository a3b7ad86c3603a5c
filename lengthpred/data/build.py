"""prepare(data_cfg): read sources (or a trace), select, split, save; load_prompts / load_splits read it back."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, List, Value, load_from_disk
from tqdm import tqdm

from lengthpred.artefacts import SPLITS_JSON, splits_dir
from lengthpred.data.readers import BadInputLog
from lengthpred.data.records import COLUMNS
from lengthpred.data.select import build_pools, select_domain
from lengthpred.data.settings import SourceData, TraceData, data_settings
from lengthpred.data.sources import SOURCES
from lengthpred.data.splits import (
    cot_variants,
    cross_pairs,
    forelen,
    served_length_shift,
    split_ids,
    update_shifts,
)
from lengthpred.data.summary import format_table, reference_lengths, summary_rows
from lengthpred.data.trace import build_from_trace, expand_paths, length_stat
from lengthpred.errors import DataError
from lengthpred.integrity import (
    atomic_write_text,
    file_digest,
    locked,
    sweep_stale_temps,
    temp_path,
    tree_digest,
)
from lengthpred.models import serving_tokenizer
from lengthpred.paths import CONF_DIR, resolve
from lengthpred.prompting import encode_prompt

log = logging.getLogger("lengthpred.data")
Record = dict[str, Any]
# explicit, so an empty `lengths` everywhere still saves as list<int64> and `length` as float64
FEATURES = Features({
    "id": Value("string"), "source": Value("string"), "domain": Value("string"), "category": Value("string"),
    "messages": List({"role": Value("string"), "content": Value("string")}),
    "reference": Value("string"), "lengths": List(Value("int64")), "length_model": Value("string"),
    "length": Value("float64"),
})


STAMP = "build.json"  # what a prepared set was built from (config, input contents, code) and its outputs' digests
PATH_KEYS = ("root", "fetch", "out_dir", "train_path", "test_path", "trace_file")  # where things live, not what they are


def config_hash(data_cfg: Mapping[str, Any]) -> str:
    """Hash of the (resolved, plain) data config minus where the files live (same data on another machine,
    same hash); a trace's files enter by their contents (`input_digests`), not their names."""
    c = json.loads(json.dumps(data_cfg, default=_plain))
    for k in PATH_KEYS:
        c.pop(k, None)
    return hashlib.sha1(json.dumps(c, sort_keys=True).encode()).hexdigest()[:12]


def input_digests(data_cfg: Mapping[str, Any]) -> list[str]:
    """`<role>:<sha256>` of every trace file a `data.kind=trace` config reads (contents, not names; sorted within
    its role, so swapping the train and test files is a change); [] for the pinned source datasets (checked by
    sha256 when fetched)."""
    if data_cfg.get("kind") != "trace":
        return []
    return [f"{role}:{d}" for role in ("train", "test")
            for d in sorted(file_digest(p) for p in expand_paths(data_cfg.get(f"{role}_path"), f"data.{role}_path", data_cfg.get("trace_file")))]


def _plain(node: Any) -> Any:
    """A config node as plain JSON data (the data group may come as a DictConfig or a dict)."""
    return dict(node) if isinstance(node, Mapping) else list(node)


def token_limit(max_tokens: int | None) -> Callable[[Record], bool] | None:
    """Accept prompts whose chat-templated length with the embedded SmolLM2 tokenizer is ≤ max_tokens.

    Characters alone mislead on CJK text (~2 tokens per character), so the char cap is a cheap
    pre-filter and this is the rule.
    """
    if max_tokens is None:
        return None
    tok = serving_tokenizer()
    return lambda r: len(encode_prompt(tok, r["messages"], prompt_id=r["id"])) <= int(max_tokens)


def _read_sources(names: list[str], root: Path, bad: BadInputLog) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for name in tqdm(names, desc="sources", disable=None):
        recs: dict[str, Record] = {}
        for r in SOURCES.get(name).load(root, bad):
            recs.setdefault(r["id"], r)
        out[name] = list(recs.values())
    return out


def build_from_sources(s: SourceData) -> tuple[list[Record], dict[str, Any]]:
    root = resolve(s.root)
    if not root.is_dir():
        raise DataError(f"data.root={root} does not exist (run scripts/fetch_datasets.py or set data.root)")
    seed = int(s.seed)
    domains = {d: list(names) for d, names in s.domains.items()}
    bad = BadInputLog(s.on_bad_input)
    by_source = _read_sources(sorted({n for names in domains.values() for n in names}), root, bad)
    pools, dropped = build_pools(by_source, domains, s.max_prompt_chars)
    accept = token_limit(s.max_prompt_tokens)
    selected: dict[str, list[Record]] = {}
    for d in domains:
        selected[d], n_rej = select_domain(pools[d], s.per_domain, seed, accept)
        if n_rej:
            dropped[d]["too_many_tokens"] += n_rej
    indomain = {d: split_ids([r["id"] for r in recs], s.split, seed) for d, recs in selected.items()}
    flat = [r for recs in selected.values() for r in recs]
    fl = s.forelen
    # exclude_train: no subset prompt (nor a CoT variant's base prompt) is in any train split, so a
    # subset scores prompts no head has seen (cross pairs train on unions of these same train splits)
    train_ids = {i for parts in indomain.values() for i in parts["train"]} if fl.exclude_train else set()
    cot = []
    if fl.reasoning != 0 and "math" in selected:
        base = [r for r in selected["math"] if r["id"] not in train_ids]
        cot = cot_variants(base, fl.reasoning or len(base), seed, fl.cot_instruction)
    records = flat + [r for r in cot if r["id"] not in {x["id"] for x in flat}]
    by_id = {r["id"]: r for r in records}
    pairs, n_dup = cross_pairs(indomain, by_id, mix=bool(s.cross_mix))
    splits = {
        "indomain": indomain,
        "cross": pairs,
        # heads also leave out what they selected on (val), so subsets are drawn from test prompts only
        "forelen": forelen(flat, cot, fl, seed, exclude=train_ids | (
            {i for parts in indomain.values() for i in parts["val"]} if train_ids else set())),
        "meta": {
            "seed": seed,
            "counts": {d: len(v) for d, v in selected.items()},
            "n_prompts": len(records),
            "available": {d: {s: len(v) for s, v in p.items()} for d, p in pools.items()},
            "dropped": {d: dict(c) for d, c in dropped.items()},
            "bad_input_skipped": dict(bad.counts),
            "cross_train_duplicates_removed": n_dup,
        },
    }
    return records, splits


def code_hash() -> str:
    """The data package's own source: a change to selection or split rules rebuilds a cached prompt set
    (the config hash alone once kept a splits file from an older selection rule)."""
    h = hashlib.sha1()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _fingerprint(data_cfg: Mapping[str, Any], reference: Path | None) -> dict[str, Any]:
    return {"config": config_hash(data_cfg), "inputs": input_digests(data_cfg),
            "reference": file_digest(reference) if reference else None, "code": code_hash()}


def _outputs(out: Path) -> dict[str, str]:
    return {SPLITS_JSON: file_digest(out / SPLITS_JSON), "prompts": tree_digest(out / "prompts")}


def _read_stamp(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return None


def _stale(out: Path, want: dict[str, Any], stamp: dict[str, Any] | None) -> str | None:
    """Why a prepared set cannot be reused (None: it can)."""
    if stamp is None or not (out / SPLITS_JSON).is_file() or not (out / "prompts").is_dir():
        return "not built yet"
    if stamp.get("state") == "building":
        return "its last build was interrupted"
    changed = [k for k in want if stamp.get(k) != want[k]]
    if changed:
        return "built from other " + ", ".join({"config": "data settings", "inputs": "trace file contents",
                                                 "reference": "reference trace", "code": "data code"}[k]
                                                for k in changed)
    if stamp.get("outputs") != _outputs(out):
        return "damaged (its files differ from their checksums)"
    return None


def prepare(data_cfg: Mapping[str, Any], *, reference: Path | None = None, force: bool = False) -> Path:
    """Build and save the prompt set of a data config group (`data.out_dir`); skipped when built from the same
    config, input contents (a trace's files), reference trace and data code, with its files intact (a
    damaged or stale set is rebuilt, saying why). `lengthpred.stages.data.prepare` is the stage: it finds
    the reference trace. One builder at a time per set (a file lock beside it).

    `reference`: the serving model's reference trace, when it exists; its lengths add
    `served_length_wasserstein` to every cross pair's shift and a served-length column to the summary (the
    trace's bytes enter the fingerprint).
    """
    out = splits_dir(data_cfg)
    with locked(out.with_name(f".{out.name}.lock")):
        sweep_stale_temps(out)
        return _prepare(data_cfg, out, reference, force)


def _prepare(data_cfg: Mapping[str, Any], out: Path, reference: Path | None, force: bool) -> Path:
    s = data_settings(data_cfg)  # a typo in the group stops here, cached or not
    ref_path = reference if reference is not None and Path(reference).is_file() else None
    served = reference_lengths(ref_path) if ref_path else None
    want = _fingerprint(data_cfg, ref_path)
    h = config_hash(data_cfg)
    why = "rebuild asked (force)" if force else _stale(out, want, _read_stamp(out))
    if why is None:
        log.info("data %s already built with config %s: %s", data_cfg["name"], h, out)
        records = load_prompts(data_cfg)
        splits = load_splits(data_cfg)
        print(format_table(summary_rows(splits, {r["id"]: r for r in records}, served)))
        return out
    if why != "not built yet":
        log.warning("%s: %s; rebuilding", out, why)
    records, splits = build_from_trace(s) if isinstance(s, TraceData) else build_from_sources(s)
    if served is not None:
        update_shifts(splits, served_length_shift(served))
        splits["meta"]["reference_trace"] = str(ref_path)
    splits["meta"]["config_hash"] = h
    splits["meta"]["name"] = s.name
    out.mkdir(parents=True, exist_ok=True)
    stat = length_stat(s.length_stat)  # sources record other models' lengths
    rows = [{**{c: r[c] for c in COLUMNS}, "length": stat(r["lengths"]) if r["lengths"] else None}
            for r in sorted(records, key=lambda r: r["id"])]
    # a crash from here on leaves a "building" stamp: loaders refuse the set and the next prepare rebuilds it
    atomic_write_text(out / STAMP, json.dumps({"state": "building"}))
    tmp = temp_path(out / "prompts")
    Dataset.from_list(rows, features=FEATURES).save_to_disk(str(tmp))
    shutil.rmtree(out / "prompts", ignore_errors=True)
    os.replace(tmp, out / "prompts")
    atomic_write_text(out / SPLITS_JSON, json.dumps(splits, indent=1, sort_keys=False))
    atomic_write_text(out / STAMP, json.dumps({**want, "outputs": _outputs(out)}, indent=1))
    by_id = {r["id"]: r for r in records}
    print(format_table(summary_rows(splits, by_id, served)))
    meta = splits["meta"]
    print(f"{len(records)} prompts; left out: {json.dumps(meta.get('dropped', {}))}; "
          f"bad input skipped: {json.dumps(meta.get('bad_input_skipped', {}))}; wrote {out}")
    return out


def data_selector(data_cfg: Mapping[str, Any]) -> str:
    """The overrides that select this data config: `data=<name>` for a config of conf/data, else (a trace named by
    `data.name`) `data=trace data.name=<name>`."""
    name = str(data_cfg["name"])
    if (CONF_DIR / "data" / f"{name}.yaml").is_file():
        return f"data={name}"
    return f"data=trace data.name={name}"


def _check_built(data_cfg: Mapping[str, Any], out: Path, part: str) -> Path:
    """`out/part` when it exists, is what the stamp says was written, and was built from this config and the
    current contents of its input files; else a DataError naming the file and the fix."""
    p = out / part
    select = data_selector(data_cfg)
    rerun = f"rerun `python scripts/prepare_data.py {select}` with the same overrides (it rebuilds)"
    if not p.exists():
        raise DataError(f"{p} not found: run `python scripts/prepare_data.py {select}` (with this run's data "
                        "overrides) first")
    stamp = _read_stamp(out)
    if stamp is None:
        if data_cfg.get("kind") == "trace":  # its files may have changed since: nothing to compare them with
            raise DataError(f"{out} was prepared before fingerprints existed (no {STAMP}); {rerun}")
        return p  # the pinned source datasets: a set prepared before stamps existed
    if stamp.get("state") == "building":
        raise DataError(f"{out}: its last build was interrupted (prompts and splits may not match); {rerun}")
    if stamp.get("config") != config_hash(data_cfg):
        raise DataError(f"{out} was prepared with other data settings than this run's; {rerun}")
    if stamp.get("inputs") != input_digests(data_cfg):
        raise DataError(f"{out} was prepared from other trace contents than data.train_path/test_path now hold; "
                        f"{rerun}")
    digest = file_digest(p) if p.is_file() else tree_digest(p)
    if (stamp.get("outputs") or {}).get(part) != digest:
        raise DataError(f"{p} is damaged (it differs from the checksum written with it); {rerun}")
    return p


def load_prompts(data_cfg: Mapping[str, Any], data_dir: str | Path | None = None) -> Dataset:
    """The prompt table (one row per unique prompt) of a prepared data config (`data.out_dir`), checked
    against what it was built from."""
    return load_from_disk(str(_check_built(data_cfg, splits_dir(data_cfg, data_dir), "prompts")))


def load_splits(data_cfg: Mapping[str, Any], data_dir: str | Path | None = None) -> dict[str, Any]:
    """The parsed splits.json of a prepared data config, checked against what it was built from."""
    p = _check_built(data_cfg, splits_dir(data_cfg, data_dir), SPLITS_JSON)
    try:
        return json.loads(p.read_text())
    except ValueError:
        raise DataError(f"{p} is damaged (not JSON); rerun `python scripts/prepare_data.py "
                        f"data={data_cfg['name']}` (it rebuilds)") from None
