"""Existing launchers, run for real on this CPU with the tiny model: Hydra's submitit launcher (`hydra/launcher=local`,
the Slurm preset's job layout without Slurm) runs two shard jobs into one sweep folder and then the merge-and-verify
job; `torchrun --nproc-per-node 2` extracts over a gloo process group. Both stores equal a one-process run's. Also:
a launcher preset without its extra, and run folders claimed atomically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lengthpred import locks
from lengthpred.paths import REPO_ROOT
from tests.conftest import compose_cfg
from tests.tolerances import assert_close_f32

FEATURES = ["features.token_layers=[]", "features.layers=[0,4]", "features.pools=[last,mean]", "features.fused=[]",
            "features.batch_size=1", "features.dtype=float32"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> tuple[Path, list[str]]:
    """A prepared 12-prompt trace and the overrides that name it (data under the tmp folder, the checkout's model
    cache kept: the tiny model borrows the embedded tokenizer)."""
    from lengthpred.stages.data import prepare

    tmp = tmp_path_factory.mktemp("launch")
    rows = [{"prompt": f"question {i} " + "word " * i, "length": 10 + i} for i in range(12)]
    (tmp / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["model=tiny", "data=trace", f"data.train_path={tmp / 'trace.jsonl'}", "data.name=lt",
            f"paths.data_dir={tmp / 'data'}", f"paths.outputs_dir={tmp / 'outputs'}", "logger=disabled", *FEATURES]
    prepare(compose_cfg(base, tmp))
    return tmp, base


def one_process_store(base: list[str], data_dir: Path):
    """The same extraction in this process, into its own data folder."""
    from lengthpred.data import load_prompts
    from lengthpred.features.store import load_features
    from lengthpred.stages.features import run_extract

    cfg = compose_cfg([*base, f"paths.data_dir={data_dir}"], data_dir / "run")
    splits = Path(compose_cfg(base).data.out_dir)
    cfg.data.out_dir = str(splits)  # the prepared prompts of the fixture
    load_prompts(cfg.data)
    return load_features(run_extract(cfg, data_dir / "run"))


def assert_same_store(got, want) -> None:
    assert got.ids == want.ids and got.names == want.names
    for name in want.names:  # another process (and thread count): float32 sums may round apart
        assert_close_f32(got.get(name), want.get(name), 49152, both_float32=True, err_msg=name)


def run(cmd: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    r = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r


@pytest.mark.slow  # three processes each importing torch: ≈40 s on 2 cores
def test_submitit_local_shards_land_in_one_sweep_and_are_merged(trace, one_torch_thread):
    from lengthpred.features.store import load_features

    tmp, base = trace
    r = run([sys.executable, str(REPO_ROOT / "scripts" / "extract.py"), "-m", "shard=0/2,1/2",
             "hydra/launcher=local", *base])
    sweeps = list((tmp / "outputs" / "default" / "multiruns").iterdir())
    assert len(sweeps) == 1, sweeps  # both jobs, whatever pid each had
    sweep = sweeps[0]
    assert sorted(p.name for p in sweep.iterdir() if (p / ".hydra").is_dir()) == ["0", "1"]
    line = (sweep / "merge.txt").read_text()
    assert "2 shards complete and intact, 12 prompts" in line and "merge-and-verify" in r.stdout
    store = Path(line.split("feature store ")[1].split(":")[0])
    assert {p.parent.name for p in (store / "parts").rglob("*.safetensors")} == {"shard-0-of-2", "shard-1-of-2"}
    assert_same_store(load_features(store), one_process_store(base, tmp / "one"))


@pytest.mark.slow  # two ranks importing torch: ≈20 s on 2 cores
def test_torchrun_two_processes_extract_over_gloo(trace, one_torch_thread):
    from lengthpred.features.store import load_features

    tmp, base = trace
    data = tmp / "torchrun"
    r = run([str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2",
             str(REPO_ROOT / "scripts" / "extract.py"), *base, f"paths.data_dir={data}",
             f"data.out_dir={tmp / 'data' / 'splits' / 'lt'}"])
    reports = [ln for ln in r.stdout.splitlines() if "(12 prompts, 5 columns" in ln]
    assert len(reports) == 1  # rank 0 alone reports, after the barrier
    store = Path(reports[0].split()[0])
    assert {p.parent.name for p in (store / "parts").rglob("*.safetensors")} == {"shard-0-of-2", "shard-1-of-2"}
    assert_same_store(load_features(store), one_process_store(base, tmp / "one_t"))


def test_a_shard_given_under_torchrun_is_refused(monkeypatch):
    from lengthpred.errors import ConfigError
    from lengthpred.stages.distributed import launcher_shard

    cfg = compose_cfg(["shard=0/2"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match="leave shard unset"):
        launcher_shard(cfg)
    assert launcher_shard(compose_cfg([])) == "1/2"


def test_a_launcher_preset_without_its_extra_is_one_line(monkeypatch, capsys):
    import importlib.util

    from lengthpred import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins.hydra_submitit") else real(name, *a))
    cli.check_launcher_extra(["extract", "hydra/launcher=joblib"])  # not ours to check
    with pytest.raises(SystemExit) as e:
        cli.check_launcher_extra(["shard=0/2,1/2", "hydra/launcher=slurm"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "pip install 'lengthpred[slurm]'" in err


CLAIMER = "import sys; from lengthpred.locks import claim; print(claim(sys.argv[1], '.run-claim.lock'))"


def test_of_runs_given_one_folder_exactly_one_claims_it(tmp_path):
    """What lengthpred.cli.claim_run_dir does at a run's start, in three processes at once."""
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path / "run")], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    got = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert got.count("None") == 1  # one claimed it; the others see its holder
    assert all(g.split()[0] == locks.host_tag() for g in got if g != "None")


def test_an_unwritable_run_folder_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    from omegaconf import OmegaConf

    from lengthpred.cli import RunDirGuard

    def read_only(self, *a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(SystemExit) as e:
        RunDirGuard().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path / "ro" / "run")}}}))
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"cannot create the run folder {tmp_path / 'ro' / 'run'}: Read-only" in err


def test_the_slurm_merge_job_starts_as_the_array_does_without_its_gpus():
    from omegaconf import OmegaConf

    from lengthpred.shard_merge import merge_parameters

    launcher = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf" / "hydra" / "launcher" / "slurm.yaml"))
    launcher |= {"partition": "gpu", "account": "lab", "setup": ["source .venv/bin/activate"],
                 "srun_args": ["--cpu-bind=none"], "additional_parameters": {"gres": "gpu:1", "mail_user": "a@b"}}
    params = merge_parameters(launcher, "slurm", "extract")
    assert params["slurm_setup"] == ["source .venv/bin/activate"] and params["slurm_srun_args"] == ["--cpu-bind=none"]
    assert params["slurm_additional_parameters"] == {"mail_user": "a@b"}  # the array's GPU request is left out
    assert params["slurm_partition"] == "gpu" and params["slurm_account"] == "lab" and params["name"] == "extract-merge"
    assert not any("gpu" in k for k in params)
    local = merge_parameters(launcher, "local", "extract")
    assert not any(k.startswith("slurm_") for k in local) and local["timeout_min"] == launcher["timeout_min"]


@pytest.mark.slow  # two ranks importing torch and generating: ≈30 s on 2 cores
def test_torchrun_two_processes_generate_and_rank_0_merges(trace, one_torch_thread):
    from lengthpred.data import load_prompts
    from lengthpred.generate.settings import GenerationSettings
    from lengthpred.generate.store import load_generations
    from lengthpred.stages.locations import generations_dir

    tmp, base = trace
    data = tmp / "torchrun_gen"
    gen = ["generate.backend=static", "generate.num_samples=2", "generate.max_new_tokens=4",
           "generate.batch_size=2", f"paths.data_dir={data}", f"data.out_dir={tmp / 'data' / 'splits' / 'lt'}"]
    r = run([str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2",
             str(REPO_ROOT / "scripts" / "generate.py"), *base, *gen])
    reports = [ln for ln in r.stdout.splitlines() if ln.startswith("generate: ") and " merged at " in ln]
    assert len(reports) == 1, r.stdout  # rank 0 alone merges and reports, after the barrier
    cfg = compose_cfg([*base, *gen])
    root = generations_dir(cfg, GenerationSettings.from_cfg(cfg.generate))
    ds = load_generations(root)  # merged, every file checked against its digest
    assert sorted(set(ds["id"])) == sorted(p["id"] for p in load_prompts(cfg.data))
    assert len(ds) == 2 * 12 and max(ds["length"]) <= 4
    assert {p.name for p in root.iterdir() if p.name.startswith("shard-")} == {"shard-0-of-2", "shard-1-of-2"}
