"""No config names another stage's output (or any file) by a glob: outputs are found by the resolvers of
`lengthpred.stages.locations` under one "newest" rule, so a path value in conf/ is a path, never a pattern."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from lengthpred.paths import REPO_ROOT

GLOB_CHARS = "*?["
MISSING = "???"  # OmegaConf's mandatory value, not a pattern


def _strings(node: object, key: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{key}[{i}]")
    elif isinstance(node, str):
        yield key, node


def _is_path(key: str, value: str) -> bool:
    last = key.rsplit(".", 1)[-1].split("[")[0]
    return "/" in value or last.endswith(("_dir", "_path", "_file", "path", "root", "heads", "summary"))


def glob_values(conf: Path) -> list[str]:
    """`file: key=value` for every path value under `conf` that holds a glob character."""
    bad = []
    for f in sorted(conf.rglob("*.yaml")):
        for key, value in _strings(yaml.safe_load(f.read_text()) or {}):
            if value != MISSING and _is_path(key, value) and any(c in value for c in GLOB_CHARS):
                bad.append(f"{f.relative_to(conf)}: {key}={value}")
    return bad


def test_no_path_value_in_conf_is_a_glob():
    assert glob_values(REPO_ROOT / "conf") == []


def test_the_check_catches_a_glob(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "x.yaml").write_text(
        'inputs:\n  curves: "**/curves.csv"\nheads: [train/*/head]\nn: 3\n'
    )
    assert glob_values(tmp_path) == [
        "eval/x.yaml: inputs.curves=**/curves.csv",
        "eval/x.yaml: heads[0]=train/*/head",
    ]
