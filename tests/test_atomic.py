"""Files the user keeps are replaced whole or not at all."""

from __future__ import annotations

import pytest

from moe_model.atomic import write_atomic, write_text_atomic


def test_a_write_replaces_the_file(tmp_path):
    path = tmp_path / "machine.json"
    path.write_text("old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["machine.json"]


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "machine.json"
    path.write_text("old")

    def fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_atomic(path, fail)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["machine.json"]


def test_a_new_file_gets_the_mode_a_plain_write_gives_and_a_replaced_one_keeps_its_own(tmp_path):
    plain, atomic = tmp_path / "plain.json", tmp_path / "atomic.json"
    plain.write_text("x")
    write_text_atomic(atomic, "x")  # mkstemp alone made it 0600: calibrate's machine file was unreadable to others
    assert atomic.stat().st_mode == plain.stat().st_mode
    atomic.chmod(0o640)
    write_text_atomic(atomic, "y")
    assert oct(atomic.stat().st_mode & 0o777) == "0o640"
