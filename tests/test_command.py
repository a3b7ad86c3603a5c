"""The `lengthpred` console command: its stage table is the scripts' own calls, `--help` lists every stage,
`--shards N` expands to a shard sweep, `store` checks, compacts and repairs a store in one line each, and a stage
runs on the packaged configs (`pkg://lengthpred.conf`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lengthpred.command import expand_shards, main, usage
from lengthpred.errors import LengthpredError
from lengthpred.stages.commands import GROUPS, STAGES
from tests.test_stage_protocol import stage_call, stage_scripts


def test_the_table_runs_what_every_stage_script_runs():
    checked = 0
    for script in stage_scripts():
        try:
            module, fn = stage_call(script)
        except AssertionError:  # not a stage script (test_stage_protocol says so)
            continue
        assert STAGES.get(script.stem) == f"{module}:{fn}", script.name
        checked += 1
    assert checked >= 25 and STAGES["demo"] == "lengthpred.pipeline:run_demo"
    assert sorted(n for names in GROUPS.values() for n in names) == sorted(STAGES)


def test_help_lists_every_stage(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in STAGES) and out == usage() + "\n"


def test_shards_expand_to_a_sweep():
    assert expand_shards(["--shards", "3", "model=tiny"]) == ["-m", "model=tiny", "shard=0/3,1/3,2/3"]
    assert expand_shards(["-m", "--shards=2"]) == ["-m", "shard=0/2,1/2"]
    assert expand_shards(["model=tiny"]) == ["model=tiny"]
    with pytest.raises(LengthpredError, match="--shards x"):
        expand_shards(["--shards", "x"])


def test_an_unknown_stage_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["trian", "head=linear"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: no stage 'trian'") and err.count("\n") == 1


def test_store_commands_are_one_line_each(tiny_model, tokenizer, tmp_path, capsys, one_torch_thread):
    from lengthpred.features.extract import extract_features
    from lengthpred.features.settings import FeatureSettings

    prompts = [{"id": f"q{i}", "messages": [{"role": "user", "content": "word " * (2 + i)}]} for i in range(4)]
    root = extract_features(FeatureSettings(layers=(0, 4), pools=("last",), fused=(), attn_layers=()), tiny_model,
                            tokenizer, prompts, out_dir=tmp_path / "s", progress=False)
    capsys.readouterr()
    main(["store", "verify", str(root)])
    main(["store", "compact", str(root)])
    main(["store", "verify", str(root)])
    main(["store", "repair", str(root)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("complete and intact (4 prompts, 3 columns)")
    assert "compacted into" in out[1] and out[2].endswith("read from compact/)") and "0 that repeated" in out[3]
    with pytest.raises(SystemExit) as e:
        main(["store", "verify", str(tmp_path)])
    assert e.value.code == 2 and "no feature manifest" in capsys.readouterr().err


@pytest.mark.slow  # a subprocess importing torch
def test_a_stage_runs_from_the_packaged_configs(tmp_path):
    rows = [{"prompt": f"question {i}", "length": 10 + i} for i in range(20)]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run([sys.executable, "-m", "lengthpred", "prepare_data", "data=trace", "data.name=t",
                        f"data.train_path={tmp_path / 'trace.jsonl'}", f"paths.data_dir={tmp_path / 'data'}",
                        f"paths.outputs_dir={tmp_path / 'outputs'}", "logger=disabled"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "data" / "splits" / "t" / "splits.json").is_file()
    run = next((tmp_path / "outputs" / "default" / "runs").iterdir())
    assert (run / "prepare_data.log").is_file()  # the job is named after its stage
