"""Damaged checkpoints are refused before torch unpickles them, naming the
file and what is wrong: bytes changed inside a tensor's storage, a truncated
file, an empty one, something that is no torch checkpoint; torch's legacy
format and archives saved without checksums load with a warning.  Through
fairseq-generate, the hub, resuming fairseq-train and
fairseq-posattn-average-checkpoints, on a real fairseq-train checkpoint."""

import argparse
import io
import shutil
import struct
import textwrap
import zipfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fairseq_posattn  # noqa: F401  (installs the verification)
from conftest import COMMON_ARGS, USER_DIR, run_cli, run_python, train_tiny
from fairseq_posattn.compat import checkpoint_integrity
from fairseq_posattn.compat.checkpoint_integrity import verify_checkpoint
from fairseq_posattn.errors import DamagedCheckpointError
from fairseq_posattn.recipes import checkpoint_average

STATE = {"model": {"w": torch.arange(20.0), "steps": torch.ones(3, dtype=torch.int64)},
         "cfg": {"model": argparse.Namespace(arch="transformer")}}


def largest_storage(path):
    """(member name, offset of its first byte, bytes) of the largest tensor
    storage in a torch checkpoint, where its data starts after the local header."""
    with zipfile.ZipFile(path) as archive:
        member = max((m for m in archive.infolist() if "/data/" in m.filename),
                     key=lambda m: m.file_size)
    with open(path, "rb") as f:
        f.seek(member.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", f.read(4))
    return member.filename, member.header_offset + 30 + name_length + extra_length, member.file_size


def damage(path, how: str) -> str:
    """Damage the checkpoint ``path`` in place; return what the refusal must say."""
    data = bytearray(path.read_bytes())
    if how == "tensor":  # up to 4 KB inside the largest storage; the size stays
        name, start, size = largest_storage(path)
        middle, span = start + size // 2, min(4096, size // 2)
        data[middle:middle + span] = bytes(b ^ 0xFF for b in data[middle:middle + span])
        expected = "the checkpoint is damaged in member %s (a tensor's storage, %d bytes): " \
                   "its CRC-32 does not match" % (name, size)
    elif how == "truncated":
        data = data[:len(data) // 2]
        expected = "the checkpoint is truncated or its zip directory is damaged (%d bytes" % len(data)
    elif how == "empty":
        data = bytearray()
        expected = "the checkpoint is empty (0 bytes)"
    else:  # text where a checkpoint should be
        data = bytearray(b"not a checkpoint\n")
        expected = "not a torch checkpoint (neither torch's zip format nor its legacy format)"
    path.write_bytes(bytes(data))
    return "%s: %s" % (path, expected)


DAMAGE = ["tensor", "truncated", "empty", "text"]


@pytest.mark.parametrize("how", DAMAGE)
def test_damage_is_refused_naming_the_file_and_what_is_wrong(tmp_path, how):
    path = tmp_path / "checkpoint.pt"
    torch.save(STATE, path)
    verify_checkpoint(str(path))  # intact
    expected = damage(path, how)
    with pytest.raises(DamagedCheckpointError) as err:
        verify_checkpoint(str(path))
    assert str(err.value).startswith(expected), str(err.value)
    assert str(err.value).endswith("Restore the file from a copy or load another checkpoint")
    assert err.value.path == str(path)


def test_files_without_checksums_load_with_a_warning(tmp_path, caplog):
    legacy, unchecked = tmp_path / "legacy.pt", tmp_path / "unchecked.pt"
    torch.save(STATE, legacy, _use_new_zipfile_serialization=False)
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(STATE, unchecked)
    finally:
        torch.serialization.set_crc32_options(True)
    for path, needle in ((legacy, "is in torch's legacy format, which has no checksums"),
                         (unchecked, "was saved without checksums")):
        caplog.clear()
        verify_checkpoint(str(path))
        assert "%s %s" % (path, needle) in caplog.text
        assert torch.equal(torch.load(path)["model"]["w"], STATE["model"]["w"])


def test_a_zip_that_is_no_torch_checkpoint_is_refused(tmp_path):
    path = tmp_path / "archive.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(DamagedCheckpointError, match="a zip archive without data.pkl"):
        verify_checkpoint(str(path))


def test_fairseq_loads_are_verified_where_torch_does_not_verify():
    from fairseq import checkpoint_utils

    assert checkpoint_integrity.torch_skips_checksums()  # torch 2.13: no CRC check on load
    assert getattr(checkpoint_utils.load_checkpoint_to_cpu, "__fairseq_posattn_compat__", False)


@pytest.fixture(scope="module")
def saved_state() -> bytes:
    buffer = io.BytesIO()
    torch.save(STATE, buffer)
    return buffer.getvalue()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), flip=st.integers(1, 255))
def test_any_changed_byte_is_refused_or_changes_nothing(tmp_path, saved_state, data, flip):
    """A byte changed anywhere (stored data, local headers, data descriptors,
    directory entries, end records): refused, or torch loads the very state."""
    position = data.draw(st.integers(0, len(saved_state) - 1))
    damaged = bytearray(saved_state)
    damaged[position] ^= flip
    path = tmp_path / "fuzzed.pt"
    path.write_bytes(bytes(damaged))
    try:
        verify_checkpoint(str(path))
    except DamagedCheckpointError as err:
        assert str(err).startswith(str(path) + ": ")
        return
    state = torch.load(path)
    assert state["model"].keys() == STATE["model"].keys()
    for key, tensor in STATE["model"].items():
        assert torch.equal(state["model"][key], tensor), (position, flip)
    assert state["cfg"]["model"] == STATE["cfg"]["model"]


# ---------------------------------------------------------------- a real fairseq-train checkpoint

@pytest.fixture(scope="module")
def trained(toy_data_bin, tmp_path_factory):
    """checkpoint1.pt, checkpoint2.pt, checkpoint_best.pt and checkpoint_last.pt
    of a tiny transformer after 2 epochs (with optimizer state)."""
    save_dir = tmp_path_factory.mktemp("integrity")
    train_tiny(toy_data_bin, save_dir, max_update=100, extra=["--max-epoch", "2"])
    assert (save_dir / "checkpoint2.pt").exists()
    return save_dir


@pytest.mark.slow
def test_an_intact_checkpoint_loads_through_the_verification(trained):
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(trained / "checkpoint_best.pt"))
    assert state["model"].keys() == torch.load(trained / "checkpoint_best.pt")["model"].keys()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tensor", "truncated", "empty"])
def test_generate_refuses_a_damaged_checkpoint(trained, toy_data_bin, tmp_path, how):
    path = tmp_path / "checkpoint_best.pt"
    shutil.copy(trained / "checkpoint_best.pt", path)
    expected = damage(path, how)
    gen = run_cli("fairseq-generate", toy_data_bin, "--user-dir", USER_DIR, "--path", path,
                  "--gen-subset", "valid", "--beam", "1", "--max-len-b", "5",
                  "--batch-size", "16", *COMMON_ARGS, check=False)
    assert gen.returncode != 0 and "H-" not in gen.stdout
    assert "fairseq-generate: error: " + expected in gen.stderr


@pytest.mark.slow
def test_the_hub_refuses_a_damaged_checkpoint(trained, toy_data_bin, tmp_path):
    shutil.copy(trained / "checkpoint_best.pt", tmp_path / "model.pt")
    expected = damage(tmp_path / "model.pt", "tensor")
    hub = run_python(textwrap.dedent("""
        import sys
        from fairseq.models.transformer import TransformerModel
        TransformerModel.from_pretrained(sys.argv[1], checkpoint_file="model.pt",
                                         data_name_or_path=sys.argv[2], user_dir=sys.argv[3])
        """), tmp_path, toy_data_bin, USER_DIR, check=False)
    assert hub.returncode != 0 and "-c: error: " + expected in hub.stderr


@pytest.mark.slow
def test_resuming_training_refuses_a_damaged_last_checkpoint(trained, toy_data_bin, tmp_path):
    save_dir = tmp_path / "run"
    shutil.copytree(trained, save_dir)
    expected = damage(save_dir / "checkpoint_last.pt", "tensor")
    resumed = train_tiny(toy_data_bin, save_dir, max_update=4, check=False)
    assert resumed.returncode != 0 and "fairseq-train: error: " + expected in resumed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tensor", "truncated", "empty"])
def test_averaging_refuses_a_damaged_checkpoint(trained, tmp_path, how):
    inputs = [tmp_path / "checkpoint1.pt", tmp_path / "checkpoint2.pt"]
    for path in inputs:
        shutil.copy(trained / path.name, path)
    expected = damage(inputs[1], how)
    output = tmp_path / "averaged.pt"
    with pytest.raises(SystemExit) as exit_:
        checkpoint_average.main(["--inputs", *map(str, inputs), "--output", str(output)])
    assert str(exit_.value).startswith("checkpoint_average: error: " + expected)
    assert not output.exists()
    checkpoint_average.main(["--inputs", str(inputs[0]), str(trained / "checkpoint_last.pt"),
                             "--output", str(output)])  # intact ones average
    assert output.exists()
