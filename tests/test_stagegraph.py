"""Caching on declared inputs (issue 28 item 2): a stage reruns when, and only when, what it reads changed: its
config nodes, the modules its script imports, or an input stage it declares; the rerun's log line says which."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lengthpred.errors import ConfigError
from lengthpred.paths import REPO_ROOT
from lengthpred.pipeline import Stage, _stray_digest, run_stages, stage_commands
from lengthpred.stagegraph import (
    COMMON_NODES,
    IGNORED_NODES,
    STAGES,
    SourceCache,
    StageDeps,
    config_nodes,
    digest,
    key_parts,
    module_closure,
)
from tests.conftest import compose_cfg

# a fake three-stage pipeline: a → b → c, each script importing its own module of a fake `lengthpred`
FAKE = {
    "a": StageDeps(config=("alpha",), inputs=()),
    "b": StageDeps(config=("beta",), inputs=("a",)),
    "c": StageDeps(config=("gamma",), inputs=("b",)),
}


@pytest.fixture
def fake(tmp_path):
    pkg = tmp_path / "src" / "lengthpred"
    (pkg / "shared").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "shared" / "__init__.py").write_text("")
    (pkg / "shared" / "io.py").write_text("X = 1\n")
    (pkg / "mod_a.py").write_text("from lengthpred.shared import io\n")
    (pkg / "mod_b.py").write_text("def f():\n    from .shared.io import X  # a lazy, relative import\n")
    (pkg / "mod_c.py").write_text("Y = 3\n")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for s in "abc":
        (scripts / f"{s}.py").write_text(f"from lengthpred import mod_{s}\n")
    (tmp_path / "conf" / "g").mkdir(parents=True)
    (tmp_path / "conf" / "g" / "x.yaml").write_text("v: 1\n")
    return tmp_path


def run_fake(root: Path, nodes: dict | None = None, deps: dict | None = None, files: dict | None = None,
             **kw) -> list[str]:
    nodes = nodes or {"root": {"seed": 0}, "alpha": {"k": 1}, "beta": {"k": 2}, "gamma": {"k": 3}}

    def work(d: Path) -> None:
        (d / "out.txt").write_text("same every run")

    args = {"b": ["g=x"]}  # stage b runs with a group choice of its own
    stages = [Stage(s, root / "scripts" / f"{s}.py", args.get(s, []), work) for s in "abc"]
    return run_stages(stages, root / "out", nodes, files or {}, src_root=root / "src", conf_dir=root / "conf",
                      deps=deps or FAKE, **kw)


def test_unchanged_rerun_runs_nothing(fake):
    assert run_fake(fake) == ["a", "b", "c"]
    assert run_fake(fake) == []


def test_a_module_only_c_imports_reruns_only_c(fake, capsys):
    run_fake(fake)
    (fake / "src" / "lengthpred" / "mod_c.py").write_text("Y = 4\n")
    capsys.readouterr()
    assert run_fake(fake) == ["c"]
    assert "[c] module lengthpred.mod_c changed: rerunning" in capsys.readouterr().out


def test_a_module_b_imports_lazily_reruns_b_and_its_readers(fake):
    run_fake(fake)
    (fake / "src" / "lengthpred" / "mod_b.py").write_text("def f():\n    return 2\n")
    assert run_fake(fake) == ["b", "c"]


def test_a_dry_run_says_what_would_rerun_and_runs_nothing(fake, capsys):
    run_fake(fake)
    (fake / "src" / "lengthpred" / "mod_b.py").write_text("Z = 1\n")
    capsys.readouterr()
    assert run_fake(fake, dry_run=True) == ["b", "c"]
    out = capsys.readouterr().out
    assert "[b] would run: module lengthpred.mod_b changed" in out and "[c] would run: input b changed" in out
    assert run_fake(fake) == ["b", "c"]  # the dry run left every marker as it was


def test_a_shared_module_reruns_every_stage_that_imports_it_and_their_readers(fake):
    run_fake(fake)
    (fake / "src" / "lengthpred" / "shared" / "io.py").write_text("X = 2\n")
    assert run_fake(fake) == ["a", "b", "c"]  # a and b import it; c reads b


def test_a_config_node_only_b_reads_reruns_b_and_its_readers(fake, capsys):
    run_fake(fake)
    capsys.readouterr()
    nodes = {"root": {"seed": 0}, "alpha": {"k": 1}, "beta": {"k": 20}, "gamma": {"k": 3}}
    assert run_fake(fake, nodes) == ["b", "c"]
    out = capsys.readouterr().out
    assert "[b] config node beta changed: rerunning" in out and "[c] input b changed: rerunning" in out
    assert "[a] cached" in out


def test_a_config_file_a_stage_selects_itself_reruns_it(fake):
    run_fake(fake)
    (fake / "conf" / "g" / "x.yaml").write_text("v: 2\n")  # b runs with g=x: the composed config has no g
    assert run_fake(fake) == ["b", "c"]


def test_a_skipped_stage_keeps_its_readers_cached_and_force_reruns_all(fake):
    run_fake(fake)
    assert run_fake(fake, skip={"a"}) == []
    assert run_fake(fake, force=True) == ["a", "b", "c"]


def test_a_stray_output_reruns_only_the_stages_that_scan_for_it(fake, capsys):
    deps = FAKE | {"b": StageDeps(config=("beta",), inputs=("a",), files=("stray",))}
    assert run_fake(fake, deps=deps, files={"stray": None}) == ["a", "b", "c"]
    capsys.readouterr()
    assert run_fake(fake, deps=deps, files={"stray": "1f2e3d"}) == ["b", "c"]  # c hashes b's key, which changed
    assert "[b] input stray changed: rerunning" in capsys.readouterr().out
    assert run_fake(fake, deps=deps, files={"stray": "1f2e3d"}) == []


def test_the_stages_that_scan_the_experiment_folder_hash_its_stray_outputs(tmp_path):
    assert {n for n, d in STAGES.items() if "stray" in d.files} == {"simulate", "traces", "batching", "evaluate",
                                                                      "tables"}
    exp = tmp_path / "exp"
    (exp / "train" / "linear").mkdir(parents=True)
    (exp / "train" / "linear" / "predictions.parquet").write_bytes(b"train's own")
    assert _stray_digest(exp, ["train"]) is None
    (exp / "stack").mkdir()
    (exp / "stack" / "predictions.parquet").write_bytes(b"a stack run by hand")
    first = _stray_digest(exp, ["train"])
    assert first is not None and _stray_digest(exp, ["train", "stack"]) is None
    (exp / "stack" / "predictions.parquet").write_bytes(b"run again")
    assert _stray_digest(exp, ["train"]) not in (None, first)


def test_a_stage_without_declared_reads_is_refused(fake):
    stage = Stage("d", fake / "scripts" / "a.py", [], lambda d: None)
    with pytest.raises(ConfigError, match="stage 'd' declares no reads"):
        run_stages([stage], fake / "out", {}, {}, src_root=fake / "src", deps=FAKE)


# the real pipeline: its declarations, its scripts' import closures, its composed config


def closure(script: str) -> dict[str, Path]:
    return module_closure([REPO_ROOT / "scripts" / script], REPO_ROOT, cache=SOURCES)


SOURCES = SourceCache()
SCRIPTS = {"datasets": "fetch_datasets.py", **{n: c[0] for n, c in stage_commands(compose_cfg(["experiment=demo"]))}}


def test_every_stage_of_the_pipeline_declares_its_reads():
    assert set(SCRIPTS) == set(STAGES)
    order = list(SCRIPTS)
    for name, d in STAGES.items():
        assert all(order.index(i) < order.index(name) for i in d.inputs), name  # only earlier stages


def test_tables_code_is_imported_by_the_tables_stage_only():
    assert [n for n, s in SCRIPTS.items() if "lengthpred.stages.tables" in closure(s)] == ["tables"]


def test_heads_code_is_not_imported_by_the_stages_before_train():
    for name in ("datasets", "model", "data", "generate", "features"):
        assert "lengthpred.heads.linear" not in closure(SCRIPTS[name]), name
    assert "lengthpred.heads.linear" in closure(SCRIPTS["train"])


def _config_reads(files) -> set[str]:
    """Top-level config nodes read as `cfg.<node>` (or `c.<node>`) in these files."""
    groups = {p.name for p in (REPO_ROOT / "conf").iterdir() if p.is_dir()}
    reads = set()
    for f in files:
        for n in ast.walk(ast.parse(Path(f).read_text())):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("cfg", "c"):
                reads |= {n.attr} & groups
    return reads


@pytest.mark.parametrize("name", sorted(STAGES))
def test_every_config_node_a_stage_reads_is_declared(name):
    script = REPO_ROOT / "scripts" / SCRIPTS[name]
    undeclared = _config_reads([script, *closure(SCRIPTS[name]).values()]) - {
        *STAGES[name].config, *COMMON_NODES, *IGNORED_NODES}
    assert not undeclared, f"{name} reads {sorted(undeclared)} without declaring it in stagegraph.STAGES"


def _keys(overrides: list[str]) -> dict[str, str]:
    cfg = compose_cfg(["experiment=demo", *overrides])
    nodes, done, keys = config_nodes(cfg), {}, {}
    for name, (script, *args) in stage_commands(cfg):
        parts = key_parts(name, REPO_ROOT / "scripts" / script, args, nodes, REPO_ROOT, REPO_ROOT / "conf", done,
                          {"reference": "r"}, SOURCES)
        keys[name] = digest(parts)
        done[name] = {"key": keys[name]}
    return keys


def test_real_keys_are_stable_and_an_eval_setting_reaches_only_its_readers():
    base = _keys([])
    assert _keys([]) == base  # the run folder (`${hydra:runtime.output_dir}`) and the time enter no key
    changed = _keys(["eval.n_boot=10"])
    assert [n for n in base if base[n] != changed[n]] == ["simulate", "traces", "batching", "evaluate", "tables"]
    changed = _keys(["features.batch_size=3"])
    assert "features" in [n for n in base if base[n] != changed[n]]
    assert all(base[n] == changed[n] for n in ("model", "data", "generate"))
