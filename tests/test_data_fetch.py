"""fetch_datasets against a loopback http.server laid out like raw.githubusercontent.com."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import threading

import pytest

from lengthpred.data.fetch import fetch_all, read_manifest
from lengthpred.errors import DataError
from lengthpred.paths import default_datasets_root

ROOT = default_datasets_root()
pytestmark = pytest.mark.datasets
PICK = ("gsm8k/test.jsonl", "humaneval/HumanEval.jsonl.gz", "castillo/validate/Mbpp/google--gemma-3-4b-it.jsonl")


def _upstream_castillo(slim_jsonl: bytes) -> bytes:
    """What the upstream repo serves: a JSON array, extra fields, output_sizes as a string."""
    rows = [json.loads(line) for line in slim_jsonl.decode().splitlines()]
    for r in rows:
        r["output_sizes"] = str(r["output_sizes"])
        r["longest_response"] = "…"
    return json.dumps(rows).encode()


@pytest.fixture()
def server(tmp_path):
    """Serve the picked files at /<repo>/<commit>/<path>; stopped (and its thread joined) after the test."""
    served = tmp_path / "served"
    entries = [e for e in read_manifest() if e["file"] in PICK]
    for e in entries:
        dst = served / e["repo"] / e["commit"] / e["path"]
        dst.parent.mkdir(parents=True, exist_ok=True)
        if e.get("transform"):
            dst.write_bytes(_upstream_castillo((ROOT / e["file"]).read_bytes()))
        else:
            shutil.copyfile(ROOT / e["file"], dst)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=5)


def test_fetch_transforms_and_verifies(server, tmp_path):
    base, _ = server
    dest = tmp_path / "datasets"
    status = fetch_all(dest, base, only=PICK, timeout_s=5)
    assert status == dict.fromkeys(PICK, "ok")
    for f in PICK:
        assert (dest / f).read_bytes() == (ROOT / f).read_bytes()
    assert set(fetch_all(dest, base, only=PICK, timeout_s=5).values()) == {"present"}


def test_fetch_rejects_wrong_bytes_and_missing_files(server, tmp_path):
    base, served = server
    e = next(e for e in read_manifest() if e["file"] == PICK[0])
    (served / e["repo"] / e["commit"] / e["path"]).write_bytes(b"tampered\n")
    with pytest.raises(DataError, match="sha256 mismatch"):
        fetch_all(tmp_path / "d", base, only=[PICK[0]], timeout_s=5)
    assert not (tmp_path / "d" / PICK[0]).exists()
    with pytest.raises(DataError, match="download failed"):
        fetch_all(tmp_path / "d", base, only=["mbpp/"], timeout_s=5)


def test_manifest_copy_matches_shared():
    shipped = hashlib.sha256(json.dumps(read_manifest()).encode()).hexdigest()
    assert shipped == hashlib.sha256(json.dumps(read_manifest(ROOT / "MANIFEST.json")).encode()).hexdigest()
