"""atomic_output: a file appears complete or not at all, with the mode a plain
open() gives under the umask."""

import os
import stat

import pytest

from fairseq_posattn.files import atomic_output


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_the_file_gets_the_mode_of_a_plain_open(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        with atomic_output(str(tmp_path / "a.txt")) as f:
            f.write("x\n")
        with open(tmp_path / "plain.txt", "w") as f:
            f.write("x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode) == mode


def test_text_and_binary(tmp_path):
    with atomic_output(str(tmp_path / "t.txt")) as f:
        f.write("ä\n")
    with atomic_output(str(tmp_path / "b.bin"), mode="wb") as f:
        f.write(b"\x00\x01")
    assert (tmp_path / "t.txt").read_bytes() == "ä\n".encode("utf-8")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"


def test_an_error_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_output(str(path)) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
