"""Every command the README and the how-to pages show at least parses: a stage script's overrides compose
with the config as `--cfg job` would compose them (in-process, nothing runs), a make target exists, a copied file
is there. `experiment=mine` is the copy the own-trace recipe makes of conf/experiment/my_trace.yaml."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

import lengthpred.cli  # noqa: F401  (registers the ${lp.*} resolvers)
from lengthpred.paths import REPO_ROOT

CONF = str((REPO_ROOT / "conf").resolve())
PAGES = ["README.md", "docs/getting-started.md", *sorted(str(p.relative_to(REPO_ROOT))
                                                         for p in (REPO_ROOT / "docs/how-to").glob("*.md"))]
_BASH = re.compile(r"```bash\n(.*?)```", re.S)
ALIASES = {"experiment=mine": "experiment=my_trace"}  # the recipe's copy of my_trace.yaml
LAUNCHERS = ("torchrun", "accelerate", "srun")


def commands() -> list[tuple[str, str]]:
    """(page, command) for every line of every ```bash block (comments and continuations joined)."""
    out = []
    for page in PAGES:
        for block in _BASH.findall((REPO_ROOT / page).read_text(encoding="utf-8")):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                cmd = re.split(r"\s+#", line, maxsplit=1)[0].strip()
                if cmd:
                    out.append((page, cmd))
    return out


_PLACEHOLDER = re.compile(r"<[^>]*>|(?<==)\.\.\.")  # <train_run>, model.path=...: a value the reader fills in


def docstring_commands() -> list[tuple[str, str]]:
    """(script, command) for every usage line in a stage script's docstring (what `--help` and a reader copy): an
    indented line that runs the script itself, with or without a launcher or an environment before it, its
    placeholders filled with a plain value and a `...` standing for the lines above it dropped."""
    out = []
    for path in sorted((REPO_ROOT / "scripts").glob("*.py")):
        if not _hydra_script(path):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""
        for line in re.sub(r"\\\n\s*", " ", doc).splitlines():
            if re.match(r"\s+\S.*\bscripts/\w+\.py\b", line) and f"scripts/{path.name}" in line:
                cmd = _PLACEHOLDER.sub("x", re.split(r"\s+#", line, maxsplit=1)[0].strip())
                out.append((path.name, cmd.replace(" ... ", " ")))
    return out


def _hydra_script(path: Path) -> bool:
    return "@hydra.main" in path.read_text(encoding="utf-8")


def _first_choice(override: str) -> str:
    """A sweep override (`head=a,b`) as its first choice; others as written."""
    parsed = OverridesParser.create().parse_overrides([override])[0]  # a syntax error raises here
    if parsed.is_sweep_override():
        return f"{parsed.get_key_element()}={next(iter(parsed.sweep_string_iterator()))}"
    return override


def check(cmd: str) -> None:
    parts = shlex.split(cmd)
    for a, b in ALIASES.items():
        parts = [b if p == a else p for p in parts]
    if parts[0] == "make":  # a dry run: the target exists and its variables expand (-W: as if set-up were due)
        subprocess.run(["make", "-n", "-W", "pyproject.toml", *parts[1:]], cwd=REPO_ROOT, check=True,
                       capture_output=True, timeout=60)
        return
    if parts[0] == "cp":
        assert (REPO_ROOT / parts[1]).exists(), f"{parts[1]} is not in the repository"
        return
    while parts and "=" in parts[0] and not parts[0].startswith("-"):  # VAR=value python ...
        parts = parts[1:]
    if parts[:2] == ["nice", "-n"]:  # nice -n 10 python ...: the command it runs
        parts = parts[3:]
    if parts and parts[0] in LAUNCHERS:  # torchrun --nproc-per-node 4 scripts/x.py ...: the script and its overrides
        script_at = next((i for i, p in enumerate(parts) if p.endswith(".py")), None)
        parts = ["python", *parts[script_at:]] if script_at is not None else []
    if parts and parts[0] == "lengthpred" and len(parts) > 1 and (REPO_ROOT / f"scripts/{parts[1]}.py").is_file():
        from lengthpred.command import expand_shards  # --shards N is the console script's, not Hydra's

        parts = ["python", f"scripts/{parts[1]}.py", *expand_shards(parts[2:])]  # it runs a stage by name
    if not parts or not parts[0].endswith("python"):
        return  # another tool's command (vllm, sbatch, pip, ...): shlex parsed it, which is all this test can say
    if parts[1] == "-m":
        __import__(parts[2])
        return
    script = REPO_ROOT / parts[1]
    assert script.is_file(), f"{parts[1]} does not exist"
    if not _hydra_script(script):
        return
    overrides = [_first_choice(p) for p in parts[2:] if p not in ("-m", "--multirun")]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        compose(config_name="config", overrides=overrides)


@pytest.mark.parametrize("page, cmd", commands(), ids=[f"{p}: {c}" for p, c in commands()])
def test_a_command_in_the_docs_parses(page, cmd):
    check(cmd)


@pytest.mark.parametrize("script, cmd", docstring_commands(), ids=[f"{p}: {c}" for p, c in docstring_commands()])
def test_a_command_in_a_script_docstring_parses(script, cmd):
    check(cmd)


def test_the_pages_show_commands_and_a_wrong_one_fails():
    assert len(commands()) > 20
    shown = {script for script, _ in docstring_commands()}
    stages = {p.name for p in (REPO_ROOT / "scripts").glob("*.py") if _hydra_script(p)
              and re.search(rf"\bscripts/{re.escape(p.name)}\b", p.read_text(encoding="utf-8"))}
    assert stages and shown == stages  # every stage script whose docstring shows its own command is tested
    with pytest.raises(Exception, match="head"):
        check("python scripts/train.py head=no_such_head")
    with pytest.raises(subprocess.CalledProcessError):
        check("make no-such-target")
