"""How a gloo rank process leaves once its work is done: without the interpreter's teardown.

A DistributedDataParallel module holds its process group, and sits in reference cycles: freed by
the garbage collection of the interpreter's teardown, it takes the group's gloo threads down
while one may still be freeing the last all-reduce's work. That work holds torch's thread-local
state, which holds a Python object; releasing it wants the GIL, which a finalizing interpreter
no longer hands to other threads, so the thread exits by forced unwinding through a noexcept
destructor and std::terminate aborts the process ("terminate called without an active
exception", torch 2.13; found under gdb: c10d::ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork
-> ~ThreadLocalState -> PyEval_AcquireThread -> PyThread_exit_thread; pytorch/pytorch#190489).
In test_token_mean's two-rank run it aborted about one run in ten. Freeing the module and
collecting before destroy_process_group() also avoids it (docs/ddp.md); a rank whose results are
written has nothing left to lose, and leaving at once also saves the teardown's seconds.
"""

import os
import sys


def exit_without_teardown(status=0):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
