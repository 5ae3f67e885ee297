"""The plugin's errors about the user's input, options or files reach the
terminal as one line, ``<command>: error: <message>``, from the plugin's
commands and from fairseq's (in a DataLoader worker, under hydra, in a spawned
training process too), with a traceback only when ``FAIRSEQ_POSATTN_TRACEBACK=1``;
any other error keeps its traceback.  fairseq's request to install
tensorboardX is gone from every command."""

import os

import pytest
import torch

from conftest import COMMON_ARGS, USER_DIR, free_port, run_cli, run_python
from test_hydra import CONFIGS

from fairseq_posattn.data.parsers import ParserSetupError
from fairseq_posattn.errors import StructureError, is_user_error

PACKAGE_DIR = os.path.dirname(os.path.abspath(USER_DIR / "errors.py"))
# refused when the model is built, by a `raise ValueError` of the plugin
CONTRADICTION = ["--encoder-learned-pos", "--no-token-positional-embeddings"]
REFUSAL = "--encoder-learned-pos makes the encoder's position embeddings learned"


def raised_in_the_package(code: str) -> BaseException:
    """The error of ``code`` run as if it were a line of the package."""
    try:
        exec(compile(code, os.path.join(PACKAGE_DIR, "probe.py"), "exec"), {})
    except Exception as error:
        return error
    raise AssertionError(f"{code} raised nothing")


def test_a_value_error_is_the_users_where_a_raise_of_the_package_raised_it():
    assert is_user_error(raised_in_the_package("raise ValueError('--flag: no')"))
    assert not is_user_error(raised_in_the_package("int('x')"))  # a call inside it that failed
    try:
        raise ValueError("not the package's")
    except ValueError as error:
        assert not is_user_error(error)
    assert is_user_error(StructureError("x")) and is_user_error(ParserSetupError("x"))
    assert not is_user_error(RuntimeError("x"))


class Failing(torch.utils.data.Dataset):
    def __init__(self, error: BaseException):
        self.error = error

    def __len__(self):
        return 1

    def __getitem__(self, index):
        raise self.error


@pytest.mark.parametrize("error, user", [
    (StructureError("trees.bin, sentence 3: HEAD 9 is out of range"), True),
    (raised_in_the_package("raise ValueError('--flag: no')"), True),
    (IndexError("a bug"), False),
])
def test_an_error_in_a_dataloader_worker_keeps_its_message(error, user):
    """torch re-raises a worker's error with the worker's traceback as its message."""
    batches = iter(torch.utils.data.DataLoader(Failing(error), num_workers=1))
    try:
        with pytest.raises(type(error)) as raised:
            next(batches)
    finally:  # the traceback keeps the iterator, and so its worker, alive
        batches._shutdown_workers()
    assert is_user_error(raised.value) == user
    assert getattr(raised.value, "user_message", None) == (str(error) if user else None)


def one_error_line(proc, command: str, message: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert f"{command}: error: " in proc.stderr and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


@pytest.mark.slow
def test_the_plugins_commands_print_one_error_line(tmp_path):
    (tmp_path / "train.en").write_text("a b\nc\n")
    (tmp_path / "train.de").write_text("x\ny\nz\n")
    proc = run_cli("fairseq-posattn-preprocess", "-s", "en", "-t", "de", "--trainpref",
                   tmp_path / "train", "--destdir", tmp_path / "bin", check=False)
    one_error_line(proc, "fairseq-posattn-preprocess", "has 2 lines but")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["fairseq-generate", "fairseq-interactive"])
def test_fairseqs_commands_print_one_error_line(command, tmp_path):
    for lang in ("en", "de"):
        (tmp_path / f"dict.{lang}.txt").write_text("a 1\n")
    (tmp_path / "empty.pt").write_bytes(b"")
    proc = run_cli(command, tmp_path, "--user-dir", USER_DIR, "--path", tmp_path / "empty.pt",
                   "-s", "en", "-t", "de", "--cpu", input="a\n", check=False)
    one_error_line(proc, command, "the checkpoint is empty (0 bytes)")
    # the traceback on request
    proc = run_cli(command, tmp_path, "--user-dir", USER_DIR, "--path", tmp_path / "empty.pt",
                   "-s", "en", "-t", "de", "--cpu", input="a\n", check=False,
                   env={"FAIRSEQ_POSATTN_TRACEBACK": "1"})
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert "DamagedCheckpointError: " in proc.stderr and "error: " not in proc.stderr


@pytest.mark.slow
def test_other_errors_keep_their_traceback(tmp_path):
    proc = run_cli("fairseq-generate", tmp_path, "--user-dir", USER_DIR, "--path",
                   tmp_path / "none.pt", "--cpu", check=False)
    assert proc.returncode == 1 and "Traceback" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_training_refusals_print_one_error_line(toy_data_bin, tmp_path):
    train = [toy_data_bin, "--user-dir", USER_DIR, "--arch", "transformer_posattn", *CONTRADICTION,
             "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "1",
             "--save-dir", tmp_path, *COMMON_ARGS]
    one_error_line(run_cli("fairseq-train", *train, check=False), "fairseq-train", REFUSAL)
    # fairseq-hydra-train: hydra catches the error and would print its own traceback
    proc = run_cli("fairseq-hydra-train", "--config-dir", CONFIGS, "--config-name", "positions",
                   f"task.data={toy_data_bin}", f"common.user_dir={USER_DIR}", "common.cpu=true",
                   "dataset.num_workers=0", "++model.encoder_learned_pos=true",
                   "++model.no_token_positional_embeddings=true", f"checkpoint.save_dir={tmp_path}",
                   cwd=tmp_path, check=False)
    one_error_line(proc, "fairseq-hydra-train", REFUSAL)
    # a process of fairseq's distributed training, spawned as on a machine with 2 GPUs
    spawning = ("import sys, torch; torch.cuda.device_count = lambda: 2; "
                "sys.argv = ['fairseq-train'] + sys.argv[1:]; "
                "from fairseq_cli.train import cli_main; cli_main()")
    proc = run_python(spawning, *train, "--distributed-world-size", "2", "--distributed-backend",
                      "gloo", "--ddp-backend", "legacy_ddp", "--distributed-init-method",
                      f"tcp://127.0.0.1:{free_port()}", check=False)
    one_error_line(proc, "fairseq-train", REFUSAL)


@pytest.mark.slow
def test_no_command_asks_to_install_tensorboardx():
    from fairseq.logging.progress_bar import SummaryWriter

    assert SummaryWriter is not None  # what --tensorboard-logdir writes with
    for command in (("fairseq-train", "--help", "--user-dir", USER_DIR),
                    ("fairseq-posattn-parse", "--help")):
        proc = run_cli(*command)
        assert "usage:" in proc.stdout
        assert "tensorboardX" not in proc.stdout + proc.stderr, command
