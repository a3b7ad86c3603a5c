"""Nothing silent (issue 29): run folders of their own, every config value checked before work with the key the
user set, WANDB_MODE honoured, boolean and infinite lengths refused with file:line:field.
One test per defect of the issue; each failed on the code before it."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from lengthpred.cli import check_fresh_run_dir
from lengthpred.data.trace import build_from_trace
from lengthpred.errors import ConfigError, DataError
from lengthpred.stages.tracking import tracked
from lengthpred.stages.validate import validate
from tests.conftest import CONF_DIR, compose_cfg


def test_runs_started_in_the_same_second_get_their_own_folders(monkeypatch):
    import os

    from lengthpred.cli import set_run_id

    set_run_id()
    assert os.environ["LP_RUN_ID"] == str(os.getpid())
    folders = []
    for pid in ("1111", "2222"):
        monkeypatch.setenv("LP_RUN_ID", pid)
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name="config", overrides=["logger=disabled"], return_hydra_config=True)
        folders.append(OmegaConf.select(cfg, "hydra.run.dir").rsplit("_", 1))
    assert [f[1] for f in folders] == ["1111", "2222"]  # whatever the second, the process tells them apart


def test_a_run_folder_holding_another_runs_results_is_refused(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "train.log").write_text("")
    check_fresh_run_dir(tmp_path)  # what Hydra writes before the script body: fine
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds another run's files \\(metrics.json\\)"):
        check_fresh_run_dir(tmp_path)



def test_a_used_run_folder_is_refused_before_hydra_overwrites_its_provenance(tmp_path, capsys):
    from lengthpred.cli import RunDirGuard

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["logger=disabled", f"hydra.run.dir={tmp_path / 'run'}",
                                 f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert [c._target_ for c in cfg.hydra.callbacks.values()] == ["lengthpred.cli.RunDirGuard",
                                                                   "lengthpred.shard_merge.MergeShards"]
    RunDirGuard().on_run_start(cfg)  # a folder that does not exist yet: fine
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    (tmp_path / "run" / ".hydra" / "config.yaml").write_text("head: {name: constant}\n")
    with pytest.raises(SystemExit) as e:
        RunDirGuard().on_run_start(cfg)
    assert e.value.code == 2 and "already holds another run's files" in capsys.readouterr().err
    assert (tmp_path / "run" / ".hydra" / "config.yaml").read_text() == "head: {name: constant}\n"
    (tmp_path / "sweep").mkdir()
    RunDirGuard().on_multirun_start(cfg)  # empty: fine
    (tmp_path / "sweep" / "0").mkdir()
    with pytest.raises(SystemExit):
        RunDirGuard().on_multirun_start(cfg)


def test_a_pipeline_stage_folder_is_the_pipelines_to_empty_or_resume(tmp_path):
    from lengthpred.pipeline import run_stage

    seen = []

    def stage(d):  # what a stage's script checks first, in its own folder and in a multirun job's folder
        check_fresh_run_dir(d)
        (d / "job").mkdir(exist_ok=True)
        check_fresh_run_dir(d / "job")
        seen.append(sorted(p.name for p in (d / "job").iterdir()))
        (d / "job" / "metrics.json").write_text("{}")
        if len(seen) == 1:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        run_stage("train", tmp_path / "train", "k", stage)
    assert run_stage("train", tmp_path / "train", "k", stage) and seen == [[], ["metrics.json"]]  # resumed
    with pytest.raises(ConfigError, match="already holds"):  # finished: the folder is no longer open to a run
        check_fresh_run_dir(tmp_path / "train" / "job")


BAD = [
    ("features.batch_size=abc", "features.batch_size='abc': must be an integer"),
    ("features.batch_size=1.5", "features.batch_size=1.5: must be an integer"),
    ("head.layer=abc", "head.layer='abc': must be an integer"),
    ("online.confidence=1.5", r"online.confidence=1.5: must be in \(0, 1\)"),
    ("eval.confidence=1.5", r"eval.confidence=1.5: must be in \(0, 1\)"),
    ("sched.n_requests=0", "sched.n_requests=0: must be >= 1"),
    ("sched.accept_beta=[0,3]", "sched.accept_beta=.*value 0 must be in"),
    ("sched.loads=[0]", "sched.loads=.*value 0 must be in"),
    ("sched.warmup=1.5", r"sched.warmup=1.5: must be in \[0, 1\)"),
    ("online.n_boot=0", "online.n_boot=0: must be >= 1"),
    ("eval.n_boot=-5", "eval.n_boot=-5: must be >= 0"),
    ("serve.n_requests=0", "serve.n_requests=0: must be >= 1"),
    ("logger=wandb logger.mode=offlin", "logger.mode='offlin': must be one of"),
    ("++head.foo=1", "head.foo: not a head setting"),
    ("++head.select.nope=[1]", "head.select.nope: head 'linear' takes no such keyword"),
    ("++head.params.nope=1", "head.params.nope: head 'linear' takes no such keyword"),
]


@pytest.mark.parametrize("override,message", BAD, ids=[b[0] for b in BAD])
def test_each_bad_value_is_one_line_naming_its_key(override, message, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with pytest.raises(ConfigError, match=message):
        validate(compose_cfg(override.split()))


def test_online_logging_without_a_key_is_refused_before_work(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="logger.mode=online needs a W&B key"):
        validate(compose_cfg(["logger=wandb", "logger.mode=online"]))


def test_wandb_mode_disabled_wins_over_the_logger_config(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = compose_cfg(["logger=wandb"])
    with tracked(cfg, "train") as tracker:
        assert tracker.run is None


def test_a_head_layer_the_model_lacks_is_named_as_head_layer(tiny_model):
    from lengthpred.stages.features import check_need_layers

    with pytest.raises(ConfigError, match=r"head.layer=99: tiny has hidden_states 0\.\.4"):
        check_need_layers(tiny_model, [(99, "last")], "tiny")


@pytest.mark.parametrize("experiment", ["demo", "bench", "paper", "castillo"])
def test_shipped_configs_pass_the_checks(experiment, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    validate(compose_cfg([f"experiment={experiment}"]))
    for head in ("constant", "linear", "egtp", "estp", "estp_learned", "probe", "proxy_reg", "proxy_cls",
                 "proxy_rank", "prompt_len", "domain_median"):
        validate(compose_cfg([f"experiment={experiment}", f"head={head}"]))


@pytest.mark.parametrize("value,detail", [("true", "is a boolean"), ("Infinity", "is not finite"),
                                          ("[3, true]", "is a boolean"), ("1e400", "is not finite")])
def test_boolean_and_infinite_lengths_name_file_line_and_field(tmp_path, value, detail):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"prompt": "hi", "length": 3}) + "\n" + '{"prompt": "yo", "length": ' + value + "}\n")
    cfg = compose_cfg(["data=trace"], tmp_path)
    with open_dict(cfg):
        cfg.data.train_path = str(p)
    with pytest.raises(DataError, match=rf"t.jsonl:2: malformed field: field 'length'=.* {detail}"):
        build_from_trace(cfg.data)
