"""Reading a DAG directory: mounted ConfigMaps (symlinks, ``..data`` swaps), subdirectories, bad files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from leoflow.housekeeping import dag_directory
from leoflow.housekeeping.dag_directory import DagDirectoryError, read_dag_directory
from leoflow.model.files.documents import Location
from tests.harness.configmap_volume import ConfigMapVolume


def names_and_texts(root: Path) -> list[tuple[str, str]]:
    return [(f.name, f.text) for f in read_dag_directory(root).files]


def test_configmap_volumes_are_read_once_per_key_with_paths_relative_to_the_root(tmp_path: Path) -> None:
    ConfigMapVolume(tmp_path / "team-a").write({"etl.yaml": "a: 1\n", "notes.txt": "not a DAG", "x.JSON": "{}"})
    ConfigMapVolume(tmp_path / "team-b").write({"report.yml": "b: 2\n"})
    (tmp_path / "team-b" / "nested").mkdir()
    (tmp_path / "team-b" / "nested" / "deep.yaml").write_text("c: 3\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config.yaml").write_text("hidden: true\n")
    (tmp_path / ".hidden.yaml").write_text("hidden: true\n")
    assert names_and_texts(tmp_path) == [
        ("team-a/etl.yaml", "a: 1\n"), ("team-a/x.JSON", "{}"), ("team-b/nested/deep.yaml", "c: 3\n"),
        ("team-b/report.yml", "b: 2\n")]
    # The timestamped directories really are there: skipping dot-entries is what avoids doubles.
    assert any(p.name.startswith("..2026") for p in (tmp_path / "team-a").iterdir())


def test_an_update_changes_the_fingerprint_and_removed_keys_disappear(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "dags")
    volume.write({"a.yaml": "v: 1\n", "b.yaml": "v: 1\n"})
    first = read_dag_directory(tmp_path)
    assert read_dag_directory(tmp_path).fingerprint == first.fingerprint  # stable while nothing changes
    volume.write({"a.yaml": "v: 2\n"})
    second = read_dag_directory(tmp_path)
    assert second.fingerprint != first.fingerprint
    assert [(f.name, f.text) for f in second.files] == [("dags/a.yaml", "v: 2\n")]
    volume.write({"a.yaml": "v: 2\n"})  # rewritten with the same content: same fingerprint
    assert read_dag_directory(tmp_path).fingerprint == second.fingerprint


def test_a_swap_during_reading_never_yields_a_mix_of_old_and_new_files(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "dags")
    keys = [f"dag-{i:02d}.yaml" for i in range(10)]
    volume.write(dict.fromkeys(keys, "generation: 0\n"))
    stop = threading.Event()

    def kubelet() -> None:
        generation = 0
        while not stop.is_set():
            generation += 1
            volume.write(dict.fromkeys(keys, f"generation: {generation}\n"))

    swapper = threading.Thread(target=kubelet)
    swapper.start()
    seen: set[str] = set()
    try:
        for _ in range(60):
            try:
                snapshot = read_dag_directory(tmp_path)
            except DagDirectoryError:  # kept changing for every attempt: allowed, never a mix
                continue
            texts = {f.text for f in snapshot.files}
            assert len(snapshot.files) == len(keys) and len(texts) == 1, texts
            seen |= texts
    finally:
        stop.set()
        swapper.join()
    assert len(seen) > 1, "the files never changed while being read; the test proved nothing"


def test_symlinks_are_followed_without_looping(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.yaml").write_text("a: 1\n")
    os.symlink(tmp_path / "real", tmp_path / "link")  # a git-sync style link to a checkout
    os.symlink(tmp_path, tmp_path / "real" / "loop")
    os.symlink(tmp_path / "gone.yaml", tmp_path / "dangling.yaml")
    names = [name for name, _ in names_and_texts(tmp_path)]
    assert sorted(names) == ["link/a.yaml"] or sorted(names) == ["real/a.yaml"]


def test_a_single_file_can_be_synced_and_bad_roots_are_errors_never_empty(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text("a: 1\n")
    assert names_and_texts(one) == [("one.yaml", "a: 1\n")]
    with pytest.raises(DagDirectoryError, match="no such directory"):
        read_dag_directory(tmp_path / "missing")


def test_undecodable_files_are_problems_of_the_snapshot_and_size_is_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "good.yaml").write_text("a: 1\n")
    (tmp_path / "latin1.yaml").write_bytes(b"dag_id: x\ndescription: caf\xe9\n")
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfa: 1\n")
    snapshot = read_dag_directory(tmp_path)
    assert [f.name for f in snapshot.files] == ["bom.yaml", "good.yaml"]
    assert snapshot.files[0].text == "a: 1\n"  # a byte-order mark is not part of the text
    (problem,) = snapshot.problems
    assert (problem.file, problem.problem, problem.location) == ("latin1.yaml", "is not UTF-8 text",
                                                                 Location(2, 17))
    monkeypatch.setattr(dag_directory, "MAX_DIRECTORY_BYTES", 10)
    with pytest.raises(DagDirectoryError, match="at most 10 are read"):
        read_dag_directory(tmp_path)
