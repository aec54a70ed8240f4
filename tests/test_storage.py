"""The one atomic write (`storage.replacing`, `replacing_all`) and the one file lock (`storage.lock_file`) that every
write into the cache, every output file and every lock of lowtide goes through."""

from __future__ import annotations

import pytest

from lowtide.storage import lock_file, replacing, replacing_all


def test_a_failed_block_leaves_the_target_as_it_was_and_no_temporary(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), replacing(target) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("the writer died")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_folder_replaces_the_folder_in_its_place(tmp_path):
    target = tmp_path / "entry"
    target.mkdir()
    (target / "stale").write_text("from before")
    with replacing(target) as staging:
        staging.mkdir()
        (staging / "fresh").write_text("now")
    assert [p.name for p in target.iterdir()] == ["fresh"] and [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_all_or_none_removes_what_it_created_when_a_later_rename_fails(tmp_path):
    (tmp_path / "blocked").mkdir()  # a folder where a file should go: its rename fails
    with pytest.raises(OSError), replacing_all([tmp_path / "a", tmp_path / "blocked"]) as temporaries:
        for temporary in temporaries.values():
            temporary.write_bytes(b"x")
    assert [p.name for p in tmp_path.iterdir()] == ["blocked"]


def test_a_held_lock_is_waited_for_no_longer_than_the_timeout(tmp_path):
    path = tmp_path / "locks" / "board.lock"
    held = lock_file(path)
    assert held is not None and held.held
    busy = []
    assert lock_file(path, timeout=0.1, on_busy=lambda: busy.append(1)) is None and busy == [1]
    held.release()
    again = lock_file(path, timeout=0.1)
    assert again is not None and not held.held
    again.release()
