"""What each pipeline stage reads, and the parts of its cache key (`lengthpred.pipeline`).

`STAGES` declares, per stage, the top-level config nodes it reads and the earlier stages whose outputs it reads.
A stage's key is built from `key_parts`: those config nodes (resolved, with every run-folder interpolation
blanked), the source of the `lengthpred` modules its script imports (found by walking the `import` statements of
the script, transitively within the package, plus the modules named by `_target_` in its config nodes), the
script's own arguments, and each declared input's key and output digests. So a change reruns only the stages
whose parts it touches, and `why_changed` names the part.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.errors import ConfigError

PACKAGE = "lengthpred"
# top-level scalars (seed, device, shard, cross_domain, ...) and `paths` enter every stage's key: they are few
# and every stage reads some of them
COMMON_NODES = ("paths",)
# nodes no stage's results depend on: where W&B logs, the pipeline's own switches, Hydra's run folders
IGNORED_NODES = ("logger", "pipeline", "hydra")
_RUN_FOLDER = "<the stage's run folder>"
# modules whose own source counts but whose imports are not followed: the scripts' glue (`lengthpred.cli`)
# imports every config group's checks and the heads' constructor defaults, which reach a stage's result only
# through its resolved config nodes (hashed) or by refusing a config (no result to cache)
BOUNDARY = frozenset({"lengthpred.cli"})


@dataclass(frozen=True)
class StageDeps:
    """A stage's declared reads: top-level config nodes, earlier stages' outputs and files by a name the pipeline
    resolves: "reference", the model's committed reference traces; "stray", outputs another script left in the
    experiment folder where a stage that scans it would read them (`stages.locations.stray_outputs`)."""

    config: tuple[str, ...]
    inputs: tuple[str, ...]
    files: tuple[str, ...] = ()


_PREDICTIONS = ("train", "train_proxy", "adapt")  # the stages that write predictions.parquet files

STAGES: dict[str, StageDeps] = {
    "datasets": StageDeps(config=("data",), inputs=()),
    "model": StageDeps(config=("model",), inputs=()),
    "data": StageDeps(config=("data", "model", "generate"), inputs=("datasets",), files=("reference",)),
    "generate": StageDeps(config=("model", "data", "generate"), inputs=("model", "data"), files=("reference",)),
    "features": StageDeps(config=("model", "data", "generate", "features"), inputs=("model", "data")),
    "train": StageDeps(
        config=("model", "data", "generate", "features", "readout", "head", "search", "stack"),
        inputs=("model", "data", "generate", "features"),
    ),
    "train_proxy": StageDeps(
        config=("model", "data", "generate", "features", "readout", "head", "search", "stack"),
        inputs=("model", "data", "generate", "features"),
    ),
    "sweep": StageDeps(
        config=("model", "data", "generate", "features", "readout", "head", "search", "sweep"),
        inputs=("model", "data", "generate", "features"),
    ),
    "adapt": StageDeps(
        config=("model", "data", "generate", "features", "readout", "online"),
        inputs=("model", "data", "generate", "features"),
    ),
    "costs": StageDeps(
        config=("model", "data", "generate", "features", "readout", "head", "online", "costs"),
        inputs=("model", "data", "generate", "features", "train", "train_proxy"),
    ),
    "simulate": StageDeps(config=("model", "data", "generate", "eval", "sched"),
                          inputs=("data", "generate", *_PREDICTIONS), files=("stray",)),
    "traces": StageDeps(config=("model", "data", "generate", "eval", "sched"),
                        inputs=("data", "generate", *_PREDICTIONS), files=("stray",)),
    "batching": StageDeps(config=("model", "data", "generate", "eval", "sched"),
                          inputs=("data", "generate", *_PREDICTIONS), files=("stray",)),
    "evaluate": StageDeps(config=("model", "data", "generate", "eval"), inputs=("data", "generate", *_PREDICTIONS),
                          files=("reference", "stray")),
    "tables": StageDeps(
        config=("model", "data", "generate", "features", "eval"),
        inputs=("data", "generate", *_PREDICTIONS, "costs", "simulate", "evaluate"), files=("stray",),
    ),
}


def digest(value: Any) -> str:
    """A short stable hash of a JSON-able value."""
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _module_file(name: str, src_root: Path) -> Path | None:
    base = src_root.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Module names an AST imports (anywhere in it: lazy imports inside functions count), relative ones resolved;
    for `from a import b`, both `a` and `a.b` (the latter may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


@dataclass
class SourceCache:
    """Each source file read once per pipeline run: its digest and the modules it imports."""

    digests: dict[Path, str] = field(default_factory=dict)
    imports: dict[Path, frozenset[str]] = field(default_factory=dict)

    def digest(self, f: Path) -> str:
        if f not in self.digests:
            self.digests[f] = hashlib.sha1(f.read_bytes()).hexdigest()[:12]
        return self.digests[f]

    def imported(self, module: str, f: Path) -> frozenset[str]:
        if f not in self.imports:
            tree = ast.parse(f.read_text(), filename=str(f))
            self.imports[f] = frozenset(_imported(tree, module, f.name == "__init__.py"))
        return self.imports[f]


def module_closure(
    entries: Iterable[Path], src_root: Path, extra: Iterable[str] = (), cache: SourceCache | None = None
) -> dict[str, Path]:
    """Every `lengthpred` module the `entries` (script files) import, transitively within the package, with the
    packages above each (their `__init__` runs on import), plus the modules named in `extra`: {name: file}.
    The imports of a `BOUNDARY` module are not followed."""
    cache = cache or SourceCache()
    found: dict[str, Path] = {}
    todo: list[tuple[str, Path]] = [(f"<{p.name}>", p) for p in entries]
    pending = set(extra)
    while todo or pending:
        if pending:
            name = pending.pop()
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                sub = ".".join(parts[:i])
                if sub.split(".")[0] == PACKAGE and sub not in found:
                    f = _module_file(sub, src_root)
                    if f is not None:
                        found[sub] = f
                        todo.append((sub, f))
            continue
        module, path = todo.pop()
        if module not in BOUNDARY:
            pending.update(cache.imported(module, path) - set(found))
    return dict(sorted(found.items()))


def _blank_run_folders(value: Any) -> Any:
    """The config with every `${hydra:...}`/`${now:...}` interpolation replaced: a stage's run folder and the
    time of a run are no part of what it computes."""
    if isinstance(value, dict):
        return {k: _blank_run_folders(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank_run_folders(v) for v in value]
    if isinstance(value, str) and ("${hydra:" in value or "${now:" in value):
        return _RUN_FOLDER
    return value


def config_nodes(cfg: DictConfig) -> dict[str, Any]:
    """Every top-level node of `cfg`, resolved, run folders blanked; the scalars together under "root"."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    plain = OmegaConf.to_container(OmegaConf.create(_blank_run_folders(raw)), resolve=True)
    nodes = {k: v for k, v in plain.items() if isinstance(v, dict) and k not in IGNORED_NODES}
    nodes["root"] = {k: v for k, v in plain.items() if not isinstance(v, dict)}
    return nodes


def _targets(value: Any) -> set[str]:
    if isinstance(value, dict):
        return {t for v in value.values() for t in _targets(v)} | (
            {str(value["_target_"]).rsplit(".", 1)[0]} if "_target_" in value else set())
    if isinstance(value, list):
        return {t for v in value for t in _targets(v)}
    return set()


def group_files(args: Iterable[str], conf_dir: Path) -> dict[str, str]:
    """Digests of the config files a stage's own `group=value[,value]` arguments select (e.g. `head=linear`):
    the composed config the pipeline holds has the default there, not what the stage runs with."""
    out = {}
    for arg in args:
        group, sep, values = arg.partition("=")
        if not sep or group.startswith(("+", "hydra")) or "." in group:
            continue
        for v in values.split(","):
            f = conf_dir / group / f"{v}.yaml"
            if f.is_file():
                out[f"conf/{group}/{v}.yaml"] = hashlib.sha1(f.read_bytes()).hexdigest()[:12]
    return out


def key_parts(name: str, script: Path, args: list[str], nodes: Mapping[str, Any], src_root: Path,
              conf_dir: Path, inputs: Mapping[str, Any], files: Mapping[str, str | None],
              cache: SourceCache, deps: Mapping[str, StageDeps] | None = None) -> dict[str, Any]:
    """The parts of stage `name`'s cache key (see the module docstring): {"config": {node: digest}, "code":
    {module: digest}, "script": digest, "args": [...], "inputs": {stage or file: digest of its key and
    outputs, or of its contents}}. `deps`: the declarations (`STAGES` unless given)."""
    deps = STAGES if deps is None else deps
    if name not in deps:
        raise ConfigError(f"stage {name!r} declares no reads in lengthpred.stagegraph.STAGES; declared: {sorted(deps)}")
    d = deps[name]
    own = {n: nodes[n] for n in ("root", *COMMON_NODES, *d.config) if n in nodes}
    modules = module_closure([script], src_root, extra=_targets(own), cache=cache)
    return {
        "config": {n: digest(v) for n, v in own.items()} | group_files(args, conf_dir),
        "code": {m: cache.digest(f) for m, f in modules.items()},
        "script": cache.digest(script),
        "args": list(args),
        "inputs": {s: digest(inputs.get(s)) for s in d.inputs} | {f: files.get(f) for f in d.files},
    }


def why_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str:
    """What differs between a stage's recorded key parts and today's, in words (the first few)."""
    if not old:
        return "no key parts recorded (built by an older pipeline)"
    said = []
    for part, label in (("config", "config node"), ("code", "module"), ("inputs", "input")):
        a, b = old.get(part, {}), new.get(part, {})
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                state = "added" if k not in a else "removed" if k not in b else "changed"
                said.append(f"{label} {k} {state}")
    if old.get("script") != new.get("script"):
        said.append("its script changed")
    if old.get("args") != new.get("args"):
        said.append("its arguments changed")
    if not said:
        return "key changed"
    return ", ".join(said[:4]) + (f" (+{len(said) - 4} more)" if len(said) > 4 else "")
