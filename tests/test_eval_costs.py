"""T6 costs (lengthpred/costs, scripts/measure_costs.py) on a tiny experiment: a 16-prompt trace,
features from the tiny Llama, heads trained by the train stage and a proxy on a tiny BERT."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf

from lengthpred.costs import (
    PREFILL,
    CostSettings,
    capture_kind,
    capture_settings,
    extraction_times,
    overhead_pct,
    write_costs,
)
from lengthpred.errors import ConfigError, DataError
from lengthpred.features import FeatureSettings
from lengthpred.paths import REPO_ROOT
from lengthpred.stages.costs import costs_from_config
from lengthpred.stages.provenance import provenance_of
from lengthpred.stages.runs import find_head_runs
from tests.conftest import compose_cfg
from tests.test_heads_proxy import tiny_encoder  # noqa: F401  (the tiny BERT proxy encoder fixture)

FEATURE_HEADS = {  # head: overrides (the tiny model has hidden_states 0..4)
    "constant": [],
    "prompt_len": [],
    "linear": ["head.layer=2"],
    "egtp": ["head.layer=2", "head.params.epochs=1", "head.select={}"],
    "estp": ["head.layer=2", "head.params.epochs=1", "head.select={}"],
    "estp_learned": ["head.layer=2", "head.params.epochs=1", "head.select={}"],
}
QUICK = [
    "++costs.predict_prompts=3",
    "++costs.predict_repeats=2",
    "++costs.extract_prompts=2",
    "++costs.extract_repeats=1",
]


@pytest.fixture(scope="module")
def tiny_experiment(tmp_path_factory, one_torch_thread, tiny_encoder):  # noqa: F811
    """(overrides, experiment dir): the train stage's layout `train/<head>/{head,metrics.json,.hydra}`."""
    from lengthpred.stages.data import prepare
    from lengthpred.stages.train import train_from_config

    tmp = tmp_path_factory.mktemp("costs")
    rng = np.random.default_rng(0)
    with open(tmp / "trace.jsonl", "w") as f:
        for i in range(16):
            long = i % 2 == 0
            text = ("Write a long essay about " if long else "Say yes: ") + f"topic {i} " + "word " * (i % 5)
            f.write(
                json.dumps({"prompt": text, "length": int((300 if long else 20) + rng.integers(0, 50))})
                + "\n"
            )
    exp = tmp / "outputs" / "tiny"
    base = [
        "model=tiny",
        "data=trace",
        f"data.train_path={tmp / 'trace.jsonl'}",
        f"paths.data_dir={tmp / 'data'}",
        "features.pools=[last,entropy]",
        "features.fused=[mix0.5]",
        "features.token_layers=[2]",
        "online.feature=hs.L2.last",
        "online.forgetting=[1.0,0.99]",
        "++cross_domain=false",
    ]

    def train(stage: str, head: str, extra: list[str]) -> None:
        out = exp / stage / head
        cfg = compose_cfg([*base, f"head={head}", *extra], out)
        train_from_config(cfg, out)
        (out / ".hydra").mkdir(exist_ok=True)
        OmegaConf.save(cfg, out / ".hydra" / "config.yaml")  # what Hydra writes beside a run

    prepare(compose_cfg(base, tmp))
    for head, extra in FEATURE_HEADS.items():
        train("train", head, extra)
    proxy = [f"head.params.encoder={tiny_encoder}", "head.params.epochs=1", "head.params.max_seq_len=24", "head.select={}"]
    train("train_proxy", "proxy_reg", [*proxy, "head.params.progress=false"])
    return base, exp


def _cfg(tiny_experiment, tmp_path, *extra: str):
    base, exp = tiny_experiment
    return compose_cfg([*base, f"++costs.experiment_dir={exp}", *QUICK, *extra], tmp_path)


def test_costs_of_every_head_and_the_online_rls(tiny_experiment, tmp_path, one_torch_thread):
    from lengthpred.heads import load_head

    doc = costs_from_config(_cfg(tiny_experiment, tmp_path), progress=False)
    rows = {r["head"]: r for r in doc["rows"]}
    assert sorted(rows) == sorted([*FEATURE_HEADS, "proxy_reg", "rls@0.99", "rls@1"])
    for name, r in rows.items():
        assert r["predict_latency_ms"] > 0 and np.isfinite(r["extraction_overhead_pct"]), name
        if not name.startswith("rls@"):
            stage = "train_proxy" if name.startswith("proxy") else "train"
            head = load_head(tiny_experiment[1] / stage / name / "head")
            assert r["n_parameters"] == head.n_parameters
    for baseline in ("constant", "prompt_len", "proxy_reg"):  # nothing captured from the prefill
        assert rows[baseline]["extraction_overhead_pct"] == 0.0 and "feature" not in rows[baseline]
    assert rows["proxy_reg"]["capture"].startswith("proxy encoder")
    kinds = {h: rows[h]["capture"] for h in ("linear", "egtp", "estp", "estp_learned", "rls@1")}
    assert kinds == {
        "linear": "hidden",
        "egtp": "hidden+entropy",
        "estp": "hidden+entropy+attn",
        "estp_learned": "hidden+entropy+attn",
        "rls@1": "hidden",
    }
    # one measurement per capture kind: heads of the same kind share it
    assert rows["linear"]["extraction_overhead_pct"] == rows["rls@1"]["extraction_overhead_pct"]
    assert rows["estp"]["extraction_overhead_pct"] == rows["estp_learned"]["extraction_overhead_pct"]
    assert rows["rls@1"]["n_parameters"] == 65 and rows["rls@1"]["update_latency_ms"] > 0
    meta = doc["meta"]
    ext = meta["extraction"]
    assert ext["n_prompts"] == 2 and ext["repeats"] == 1 and len(ext["prompt_tokens"]) == 2
    assert set(ext["runs_s"]) == {PREFILL, "hidden", "hidden+entropy", "hidden+entropy+attn"}
    assert meta["predict"]["repeats"] == 2 and meta["predict"]["batch_size"] == 1
    assert meta["update"]["rls@1"]["source"] == "measured" and meta["model"] == "tiny"


def test_update_latency_comes_from_the_online_summary_when_present(tiny_experiment, tmp_path):
    base, exp = tiny_experiment
    summary = tmp_path / "adapt" / "summary.csv"
    summary.parent.mkdir()
    summary.write_text("pair,head,update_ms\na->b,rls@1,0.5\nb->a,rls@1,0.7\na->b,static,\n")
    cfg = _cfg(
        tiny_experiment,
        tmp_path,
        "++costs.heads=[train/linear]",
        f"++costs.online_summary={summary}",
    )
    doc = costs_from_config(cfg, progress=False)
    rows = {r["head"]: r for r in doc["rows"]}
    assert sorted(rows) == ["linear", "rls@0.99", "rls@1"]
    assert rows["rls@1"]["update_latency_ms"] == pytest.approx(0.6)  # mean over pairs, as T6 reads it
    assert doc["meta"]["update"]["rls@0.99"]["source"] == "measured"


@pytest.mark.slow  # runs a script in a subprocess
def test_script_writes_costs_json_and_t6_gets_the_columns(tiny_experiment, tmp_path):
    from lengthpred.eval import write_results
    from lengthpred.eval.report import evaluate_run, make_tables
    from lengthpred.stages.locations import costs_file
    from tests.eval_fixtures import write_experiment

    base, exp = tiny_experiment
    run_dir = tmp_path / "outputs" / "costs"
    cmd = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "measure_costs.py"),
        *base,
        f"++costs.experiment_dir={exp}",
        *QUICK,
        "++costs.online=false",
        "logger=disabled",
        f"hydra.run.dir={run_dir}",
    ]
    r = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "costs of 7 heads" in r.stdout
    assert costs_file(tmp_path / "outputs") == run_dir / "costs.json"  # what make_tables reads

    root = write_experiment(tmp_path / "eval", n=15)
    res = evaluate_run(
        root,
        provenance_of(None),
        n_boot=0,
        reference=root / "reference.jsonl",
        splits_json=root / "splits.json",
    )
    out = make_tables(
        [write_results(res, root / "results.csv")], root / "tables", costs=run_dir / "costs.json", plot=False
    )
    t6 = out.tables["T6"].to_markdown()
    header = t6.splitlines()[2]
    for col in ("Params", "Extraction overhead (% of prefill)", "Predict latency (ms)"):
        assert col in header
    egtp = next(ln for ln in t6.splitlines() if ln.startswith("| egtp |"))
    assert "—" not in egtp.split("|")[3] and "—" not in egtp.split("|")[4]  # overhead and latency filled
    assert "capture" not in header and "feature" not in header  # descriptive strings stay in the JSON


def test_bad_inputs_are_named(tiny_experiment, tmp_path):
    base, exp = tiny_experiment
    with pytest.raises(DataError, match="no saved heads"):
        find_head_runs(tmp_path, ["train"])
    # a head trained for another model
    other = tmp_path / "other"
    (other / "train").mkdir(parents=True)
    src = exp / "train" / "constant"
    (other / "train" / "constant").symlink_to(src)
    cfg = compose_cfg([*base, "model=smollm2-135m", f"++costs.experiment_dir={other}", *QUICK], tmp_path)
    with pytest.raises(ConfigError, match="another model than smollm2-135m"):
        costs_from_config(cfg, progress=False)
    with pytest.raises(ConfigError, match="unknown keys"):
        CostSettings.from_cfg({"predict_reps": 3})
    with pytest.raises(ConfigError, match="clock"):
        CostSettings.from_cfg({"clock": "gpu"})
    with pytest.raises(ConfigError, match="unknown pooling"):
        capture_kind("max")
    # a feature head without a run config, and no store for the current config
    bare = tmp_path / "bare" / "train" / "linear"
    bare.mkdir(parents=True)
    for f in ("head", "metrics.json"):
        (bare / f).symlink_to(exp / "train" / "linear" / f)
    cfg = compose_cfg(
        [*base, f"++costs.experiment_dir={bare.parents[1]}", "features.pools=[mean]", *QUICK], tmp_path
    )
    with pytest.raises(DataError, match="no feature store"):
        costs_from_config(cfg, progress=False)


def test_config_group_matches_the_settings():
    yaml = OmegaConf.load(REPO_ROOT / "conf" / "costs" / "default.yaml")
    keys = set(yaml) - {"name", "experiment_dir"}
    assert keys == {f for f in CostSettings.__dataclass_fields__}
    d = {k: v for k, v in OmegaConf.to_container(yaml).items() if k in keys and k != "seed"}
    assert CostSettings.from_cfg(d) == CostSettings()  # the yaml states the code's defaults


def test_capture_settings_keep_one_layer_and_what_the_pooling_needs():
    base = FeatureSettings()
    s = capture_settings(base, 20, "last")
    assert s.layers == (20,) and s.pools == ("last",) and not s.needs_entropy and not s.needs_attention
    s = capture_settings(base, 20, "entropy")
    assert s.needs_entropy and not s.needs_attention
    s = capture_settings(base, 20, "fused_mix0.5")
    assert s.pool_names == ("fused_mix0.5",) and s.needs_entropy and s.needs_attention
    s = capture_settings(base, 7, "learned")
    assert s.token_layers == (7,) and s.needs_entropy and s.needs_attention
    assert overhead_pct({PREFILL: [1.0, 2.0, 3.0], "x": [3.0, 3.0, 3.0]}) == {"x": pytest.approx(50.0)}


def test_extraction_times_interleave_every_variant(tiny_model, tokenizer, one_torch_thread):
    from lengthpred.prompting import encode_prompt

    seqs = [
        encode_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ("hi", "a longer question here")
    ]
    variants = {
        "hidden": capture_settings(FeatureSettings(), 2, "last"),
        "hidden+entropy+attn": capture_settings(FeatureSettings(), 2, "fused_prod"),
    }
    times = extraction_times(tiny_model, seqs, variants, repeats=2, clock="wall", progress=False)
    assert set(times) == {PREFILL, "hidden", "hidden+entropy+attn"}
    assert all(len(v) == 2 and min(v) > 0 for v in times.values())


def test_write_costs_is_what_read_costs_reads(tmp_path):
    from lengthpred.eval.inputs import read_costs

    doc = {"meta": {"extraction": {"n_prompts": 4}}, "rows": [{"head": "linear", "predict_latency_ms": 0.1}]}
    df = read_costs(write_costs(doc, tmp_path / "costs.json"))
    assert df.to_dict("records") == [{"head": "linear", "predict_latency_ms": 0.1}]

