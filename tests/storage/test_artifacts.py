"""Artifacts through the real storage client: packed, uploaded, fetched and unpacked, over a bucket of
the S3-compatible server (moto, its own process) and over file://; and the pod's ``leoflow artifacts``
verb as a process, the way the init container and the upload sidecar run it."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from leoflow.model.artifacts.declared import OutputArtifact
from leoflow.model.artifacts.objects import PackedArtifact, artifact_key, outcome_problem
from leoflow.storage.artifacts import ArtifactRejected, download_input, upload_outputs
from leoflow.storage.objects import ObjectMissing, ObjectStore


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _producer(root: Path) -> None:
    (root / "out" / "deep").mkdir(parents=True)
    (root / "out" / "a.txt").write_text("alpha\n")
    (root / "out" / "deep" / "b.bin").write_bytes(bytes(range(256)) * 1000)
    (root / "report.json").write_text('{"rows": 3}')


def test_a_directory_and_a_file_go_up_and_come_back_whole(archive_url: str, tmp_path: Path) -> None:
    store = ObjectStore(archive_url)
    work = tmp_path / "producer"
    _producer(work)
    outputs = [OutputArtifact("data", "out"), OutputArtifact("report", "report.json")]
    results = asyncio.run(upload_outputs(store, "c1", 7, work, outputs))
    assert [r.complete for r in results] == [True, True]
    data, report = results
    assert (data.kind, data.files, data.size_bytes) == ("directory", 4, 6 + 256_000)  # out, a.txt, deep, b.bin
    assert report.kind == "file" and report.object_key == artifact_key("c1", 7, "report")
    assert data.stored_bytes < data.size_bytes  # compressed
    assert outcome_problem(results, {}) is None
    consumer = tmp_path / "consumer"
    asyncio.run(download_input(store, data.object_key or "", consumer / "in" / "data", digest=data.digest))
    asyncio.run(download_input(store, report.object_key or "", consumer / "r.json", digest=report.digest))
    assert _tree(consumer / "in" / "data") == _tree(work / "out")
    assert (consumer / "r.json").read_bytes() == b'{"rows": 3}'


def test_a_missing_output_fails_the_try_unless_optional(archive_url: str, tmp_path: Path) -> None:
    store = ObjectStore(archive_url)
    results = asyncio.run(upload_outputs(store, "c1", 8, tmp_path, [OutputArtifact("gone", "nothing/here")]))
    assert results[0].missing and not results[0].complete
    problem = outcome_problem(results, {"gone": False})
    assert problem is not None and "'gone'" in problem and "optional: true" in problem
    assert outcome_problem(results, {"gone": True}) is None


def test_an_output_over_its_limit_is_refused_before_any_upload(archive_url: str, tmp_path: Path) -> None:
    store = ObjectStore(archive_url)
    (tmp_path / "big").write_bytes(b"x" * 5000)
    (tmp_path / "small").write_bytes(b"y" * 10)
    results = asyncio.run(upload_outputs(store, "c1", 9, tmp_path, [OutputArtifact("small", "small"),
                                                                     OutputArtifact("big", "big")],
                                         max_bytes=4096))
    assert results[0].complete
    assert results[1].problem == "is 5,000 bytes, over the limit of 4,096 bytes" and results[1].object_key is None
    assert asyncio.run(store.keys("artifacts/c1/9/")) == [artifact_key("c1", 9, "small")]
    assert outcome_problem(results, {}) == "artifact 'big': is 5,000 bytes, over the limit of 4,096 bytes"
    # The try's budget: the first output fits, the second would pass it.
    budget = asyncio.run(upload_outputs(store, "c1", 10, tmp_path, [OutputArtifact("big", "big"),
                                                                     OutputArtifact("big2", "big")],
                                        max_try_bytes=6000))
    assert budget[0].complete and not budget[1].complete
    assert "the try's artifacts would exceed 6,000 bytes in all" in (budget[1].problem or "")


def _tar(members: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _dir_tar(*members: tarfile.TarInfo) -> bytes:
    """A directory artifact's archive ('.' first) holding ``members`` (regular files get 4 bytes)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        root = tarfile.TarInfo(".")
        root.type = tarfile.DIRTYPE
        archive.addfile(root)
        for member in members:
            archive.addfile(member, io.BytesIO(b"evil") if member.isreg() else None)
    return raw.getvalue()


def _member(name: str, *, link: str | None = None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    if link is None:
        info.size = 4
    else:
        info.type, info.linkname = tarfile.SYMTYPE, link
    return info


@pytest.mark.parametrize("payload", [
    _dir_tar(_member("../escaped")),  # a name leaving the directory
    _dir_tar(_member("/tmp/escaped-abs")),  # an absolute name
    _dir_tar(_member("link", link="/etc"), _member("link/escaped")),  # through a link to outside
    _tar({"a": b"1", "b": b"2"}),  # neither a directory ('.') nor one file
], ids=["dotdot", "absolute", "symlink", "two-files"])
def test_an_unsafe_archive_is_refused_and_writes_nothing_outside(archive_url: str, tmp_path: Path,
                                                                 payload: bytes) -> None:
    store = ObjectStore(archive_url)
    asyncio.run(store.put("artifacts/x/1/evil.tar.gz", payload))
    with pytest.raises(ArtifactRejected):
        asyncio.run(download_input(store, "artifacts/x/1/evil.tar.gz", tmp_path / "dest" / "in"))
    assert not (tmp_path / "dest" / "escaped").exists() and not Path("/etc/escaped").exists()
    assert not Path("/tmp/escaped-abs").exists()


def test_garbage_and_a_wrong_digest_are_refused(archive_url: str, tmp_path: Path) -> None:
    store = ObjectStore(archive_url)
    asyncio.run(store.put("artifacts/x/2/junk.tar.gz", b"\x00not a gzip at all" * 100))
    with pytest.raises(ArtifactRejected):
        asyncio.run(download_input(store, "artifacts/x/2/junk.tar.gz", tmp_path / "junk"))
    (tmp_path / "f").write_text("content")
    [done] = asyncio.run(upload_outputs(store, "x", 3, tmp_path, [OutputArtifact("f", "f")]))
    with pytest.raises(ArtifactRejected, match="digest"):
        asyncio.run(download_input(store, done.object_key or "", tmp_path / "g", digest="sha256:" + "0" * 64))
    with pytest.raises(ObjectMissing):
        asyncio.run(download_input(store, "artifacts/x/3/never.tar.gz", tmp_path / "h"))


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEOFLOW_LOG_ARCHIVE_URL": url}
    return subprocess.run([sys.executable, "-m", "leoflow", "artifacts", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_pod_verbs_upload_then_fetch(archive_url: str, tmp_path: Path) -> None:
    """The sidecar's upload (after SIGTERM, as the kubelet stops a native sidecar) and the init
    container's fetch, as processes against the same storage."""
    work = tmp_path / "task"
    outputs = json.dumps([{"name": "data", "path": "out"}, {"name": "maybe", "path": "none", "optional": True}])
    env = {**os.environ, "LEOFLOW_LOG_ARCHIVE_URL": archive_url}
    sidecar = subprocess.Popen([sys.executable, "-m", "leoflow", "artifacts", "upload", "--root", str(work),
                                "--cluster", "c1", "--try-id", "42", "--outputs", outputs, "--on-signal"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert sidecar.stdout is not None
    assert json.loads(sidecar.stdout.readline()) == {"waiting": "SIGTERM"}  # its handler is in place
    _producer(work)  # the task writes while the sidecar waits
    assert sidecar.poll() is None  # it uploads nothing before it is told
    sidecar.send_signal(signal.SIGTERM)
    out, err = sidecar.communicate(timeout=120)
    assert sidecar.returncode == 0, err
    manifest = [PackedArtifact.from_json(a) for a in json.loads(out.splitlines()[-1])["artifacts"]]
    assert [(m.name, m.complete, m.missing) for m in manifest] == [("data", True, False), ("maybe", False, True)]
    stored = asyncio.run(ObjectStore(archive_url).get("artifacts/c1/42/manifest.json"))
    assert [a["name"] for a in json.loads(stored)] == ["data", "maybe"]
    data = manifest[0]
    inputs = json.dumps([{"name": "d", "key": data.object_key, "path": "in/d", "digest": data.digest},
                         {"name": "opt", "key": None, "path": "in/o", "optional": True}])
    fetched = _cli("fetch", "--root", str(tmp_path / "consumer"), "--inputs", inputs, url=archive_url)
    assert fetched.returncode == 0, fetched.stderr
    assert _tree(tmp_path / "consumer" / "in" / "d") == _tree(work / "out")
    missing = json.dumps([{"name": "d", "key": "artifacts/c1/42/nope.tar.gz", "path": "in/x"}])
    refused = _cli("fetch", "--root", str(tmp_path / "c2"), "--inputs", missing, url=archive_url)
    assert refused.returncode == 1 and "input artifact 'd':" in refused.stderr and "Traceback" not in refused.stderr
    bad = _cli("fetch", "--root", str(tmp_path / "c3"), "--inputs", "{not json", url=archive_url)
    assert bad.returncode == 2 and "--inputs: not JSON" in bad.stderr and "Traceback" not in bad.stderr
