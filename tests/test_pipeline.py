from lengthpred.pipeline import config_hash, run_stage


def test_stage_runs_once_per_key_and_reruns_after_crash(tmp_path):
    calls = []

    def work(d):
        calls.append(d)
        (d / "out.txt").write_text("x")

    assert run_stage("s", tmp_path / "s", "k1", work) is True
    assert run_stage("s", tmp_path / "s", "k1", work) is False
    assert run_stage("s", tmp_path / "s", "k2", work) is True
    assert len(calls) == 2

    def crash(d):
        raise RuntimeError("boom")

    try:
        run_stage("s", tmp_path / "s", "k3", crash)
    except RuntimeError:
        pass
    assert run_stage("s", tmp_path / "s", "k2", work) is True  # no marker left by the crash


def test_config_hash_is_order_independent_and_sensitive():
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})
