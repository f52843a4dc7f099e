"""Runs of the Python trainer (tests/harness/ddp_trainer.py) forked from a server process that
has already imported torch, the compiler modules torch.optim's first optimizer imports, bload
and the trainer: a Python process spends about 3 s of CPU importing them, most of a small run's
time, and the DDP tests start dozens. Each run is still a process of its own, started with its
own command line and environment, as torchrun or a shell starts one: it has its pid (to kill or
stop), its exit status or signal, and its stdout and stderr, through the subset of
subprocess.Popen's interface the tests use. What the interpreter and torch read from the
environment as they start (PYTHON*, OMP_NUM_THREADS, BLOAD_LIBRARY) is the server's: the tests'
environment, which every run's extends with torchrun's variables alone.

The server is multiprocessing's forkserver, started by the first run with this process's
environment, and stopped (and waited for) when this process exits, so that the runs' CPU time is
counted as this process's children's. This module is imported by the server and by every run,
so it imports nothing heavy itself."""

import atexit
import multiprocessing
import multiprocessing.forkserver
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import weakref

TESTS = pathlib.Path(__file__).resolve().parents[1]
TRAINER = TESTS / "harness" / "ddp_trainer.py"
# What the server imports once, so that no run imports it again.
PRELOAD = ["torch", "torch._dynamo", "bload", "ddp_trainer", "forked_trainer"]
# Where the server finds them: its sys.path comes from PYTHONPATH (multiprocessing's forkserver
# passes it this process's sys.path, and does not use it), and it ignores a module it cannot
# import (test_forked_trainer.py checks that none is left out).
SERVER_PATH = [TESTS / "harness", TESTS / "python", TESTS / "support"]

_context = None


def _server():
    """The forkserver context, its server started on first use."""
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(path) for path in SERVER_PATH] + ([saved] if saved else [])
        )
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved
        # Stopped before multiprocessing's own exit handler, which would wait for it otherwise
        # never: the server only ends when told to (its pipe closed), and a server left running
        # takes the runs' CPU time out of this process's children's. _stop is how
        # multiprocessing's own tests stop it.
        atexit.register(multiprocessing.forkserver._forkserver._stop)
        _context = context
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
    # multiprocessing made the forkserver this process's default way to start one: back to the
    # platform's, as in a process started afresh (the DataLoader's workers use it).
    multiprocessing.set_start_method(None, force=True)
    import ddp_trainer

    ddp_trainer.main()


def _imported(names, connection):
    connection.send([name for name in names if name in sys.modules])


def preloaded():
    """Which of PRELOAD a run finds imported as it starts: all of them, unless the server
    failed to import one (which it does in silence)."""
    receiver, sender = _server().Pipe(duplex=False)
    process = _server().Process(target=_imported, args=(PRELOAD, sender))
    process.start()
    sender.close()
    found = receiver.recv()
    process.join()
    return found


class ForkedTrainer:
    """A started run of the trainer: `command` is [sys.executable, TRAINER, ARGUMENT...], `env`
    its environment (None: this process's)."""

    def __init__(self, command, env=None):
        assert is_trainer(command), command
        self.args = [str(word) for word in command]
        directory = tempfile.mkdtemp(prefix="bload-forked-trainer-")
        # Removed with this object, also where a test never waits for the run.
        weakref.finalize(self, shutil.rmtree, directory, True)
        self._outputs = [os.path.join(directory, name) for name in ("stdout", "stderr")]
        for path in self._outputs:  # there, empty, for a run killed before it opens them
            open(path, "w").close()
        self._read = None
        self._process = _server().Process(
            target=_main,
            args=(self.args[2:], dict(os.environ if env is None else env), *self._outputs),
        )
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self):
        """The exit status, or minus the signal that ended it (None while it runs)."""
        return self._process.exitcode

    def poll(self):
        return self.returncode

    def send_signal(self, signal):
        """As Popen's: nothing once the run has ended (its pid may be another's by then)."""
        if self.poll() is None:
            os.kill(self.pid, signal)

    def kill(self):
        if self.poll() is None:
            self._process.kill()
            self._process.join()  # ended: a run left running would hold up this process's exit

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
