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


def test_an_interrupted_stage_resumes_in_its_folder_under_the_same_key_only(tmp_path):
    out = tmp_path / "s"

    def first_part_then_crash(d):
        (d / "part1.txt").write_text("done")
        raise RuntimeError("killed")

    try:
        run_stage("s", out, "k1", first_part_then_crash)
    except RuntimeError:
        pass
    seen = []

    def resume(d):
        seen.append((d / "part1.txt").exists())
        (d / "part2.txt").write_text("done")

    assert run_stage("s", out, "k1", resume) is True and seen == [True]  # same key: the finished part is kept
    assert sorted(p.name for p in out.iterdir()) == ["_stage.json", "part1.txt", "part2.txt"]  # no started marker
    try:
        run_stage("s", out, "k2", first_part_then_crash)
    except RuntimeError:
        pass
    (out / "part2.txt").write_text("stale")  # a file no k2 run wrote
    assert run_stage("s", out, "k3", resume) is True and seen[-1] is False  # another key: an emptied folder
    assert run_stage("s", out, "k3", resume, force=True) and seen[-1] is False  # force: never resumes
