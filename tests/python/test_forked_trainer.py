"""The tests' launcher of the Python trainer (forked_trainer.py): its runs start with what the
server imported, and report their exit status, signal and output as a process started afresh
would."""

import signal
import sys

import forked_trainer
from ddp_support import PY_TRAINER


def test_every_run_starts_with_torch_bload_and_the_trainer_imported():
    assert forked_trainer.preloaded() == forked_trainer.PRELOAD


def test_a_refused_run_reports_argparses_status_and_message():
    run = forked_trainer.start([sys.executable, PY_TRAINER, "--world-size", "0"])
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 2, stderr
    assert stdout == "" and "argument --world-size" in stderr, stderr


def test_a_killed_run_reports_the_signal_and_ends_waiting():
    run = forked_trainer.start([sys.executable, PY_TRAINER, "--world-size", "1", "--epochs", "50"])
    assert run.poll() is None
    run.kill()
    assert run.returncode == -signal.SIGKILL
    run.send_signal(signal.SIGTERM)  # ended: nothing, as Popen's
    assert run.wait(timeout=10) == -signal.SIGKILL
