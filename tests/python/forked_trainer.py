"""Runs of the Python trainer (tests/harness/ddp_trainer.py) forked from a server process that
has already imported torch, the compiler modules torch.optim's first optimizer imports, bload
and the trainer: a Python process spends about 3 s of CPU importing them, most of a small run's
time, and the DDP tests start dozens. Each run is still a process of its own, started
with its own command line and environment, as torchrun or a shell starts one: it has its pid
(to kill or stop), its exit status or signal, and its stdout and stderr, through the subset of
subprocess.Popen's interface the tests use. The server is multiprocessing's forkserver, started
by the first run with this process's sys.path and environment.

This module is imported by the server and by every run, so it imports nothing heavy itself."""

import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HARNESS = pathlib.Path(__file__).resolve().parents[1] / "harness"
TRAINER = HARNESS / "ddp_trainer.py"
# What the server imports once, so that no run imports it again.
PRELOAD = ["torch", "torch._dynamo", "bload", "ddp_trainer", "forked_trainer"]

_context = None


def _server():
    global _context
    if _context is None:
        if str(HARNESS) not in sys.path:  # the server's sys.path is this process's
            sys.path.append(str(HARNESS))
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def is_trainer(command):
    """Whether `command` (its words) runs the Python trainer with this Python."""
    return [str(word) for word in command[:2]] == [sys.executable, str(TRAINER)]


def _main(arguments, environment, stdout_path, stderr_path):
    """A run, in the forked process: the trainer's main() with `arguments` as its command line,
    `environment` as its environment, and its output in the two files."""
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(file, fd)
        os.close(file)
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = [str(TRAINER), *arguments]
    import ddp_trainer

    ddp_trainer.main()


class ForkedTrainer:
    """A started run of the trainer: `command` is [sys.executable, TRAINER, ARGUMENT...], `env`
    its environment (None: this process's)."""

    def __init__(self, command, env=None):
        assert is_trainer(command), command
        self.args = [str(word) for word in command]
        self._directory = tempfile.mkdtemp(prefix="bload-forked-trainer-")
        self._outputs = [os.path.join(self._directory, name) for name in ("stdout", "stderr")]
        self._process = _server().Process(
            target=_main,
            args=(self.args[2:], dict(os.environ if env is None else env), *self._outputs),
            daemon=False,
        )
        self._process.start()
        self.pid = self._process.pid
        self._read = None

    @property
    def returncode(self):
        """The exit status, or minus the signal that ended it (None while it runs)."""
        return self._process.exitcode

    def poll(self):
        return self.returncode

    def send_signal(self, signal):
        os.kill(self.pid, signal)

    def kill(self):
        self._process.kill()

    def wait(self, timeout=None):
        self.communicate(timeout)
        return self.returncode

    def communicate(self, timeout=None):
        """Waits for the run to end: its (stdout, stderr) as text; subprocess.TimeoutExpired if
        it runs past `timeout`, as Popen's."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        if self._read is None:
            self._read = []
            for path in self._outputs:
                with open(path, errors="replace") as file:
                    self._read.append(file.read())
            shutil.rmtree(self._directory, ignore_errors=True)
        return tuple(self._read)


def start(command, env=None):
    """`command` started: forked from the server where it runs the Python trainer, otherwise
    with subprocess.Popen (its outputs piped, as text)."""
    if is_trainer(command):
        return ForkedTrainer(command, env)
    return subprocess.Popen(
        [str(word) for word in command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
