"""Liveness of DDP ranks: heartbeats at the ranks' TCPStore, each rank's world size and start-up
outcome, and a watchdog that names a stalled rank on every other rank within a window that does
not depend on the collectives' timeout (docs/ddp.md).

Every rank makes one before its process group, on a store the ranks share:

    liveness = bload.distributed.Liveness(host, port, rank, world_size, window=30)
    dist.init_process_group(...); ...             # on an error: lost = liveness.failed(error)
    liveness.started()                            # the first collective is next
    for batch in loader:
        liveness.advance()                        # before the batch's collectives
        ...
    liveness.finished()                           # a clean end

The watchdog runs on C++ threads (bload::Liveness, cpp/include/bload/liveness.h), which need no
GIL: it goes on while this rank's main thread waits in a collective or holds the GIL. When it
finds a fault it writes "rank R: stopped: FAULT" to stderr and ends the process with exit status
3 (with act=False it only records the fault, for fault()).
"""

import numbers

from bload import _library

_library.load()

__all__ = ["Liveness"]


class Liveness:
    """This rank's heartbeat and watchdog. `host`, `port`: the ranks' TCPStore, which must exist
    (it waits up to `join_timeout` seconds for it); `window`: seconds after which a rank silent,
    or stuck behind the others, is named; `store_rank`: the rank whose process hosts the store
    (-1: a launcher or torchrun's agent does); `prefix`: the keys' (a run of its own per
    torchrun restart)."""

    def __init__(
        self,
        host,
        port,
        rank,
        world_size,
        *,
        window=30.0,
        join_timeout=300.0,
        store_rank=-1,
        prefix="bload/liveness",
        act=True,
    ):
        import torch

        # A store_rank outside the world names a rank that never comes: refused here, naming
        # it (the core checks world_size itself, and only that store_rank is -1 or more).
        if isinstance(store_rank, bool) or not isinstance(store_rank, numbers.Integral):
            raise TypeError(f"store_rank = {store_rank!r}: expected an int")
        if int(world_size) >= 1 and not -1 <= store_rank < int(world_size):
            raise ValueError(
                f"store_rank = {store_rank}: expected -1 (a launcher or torchrun's agent hosts the "
                f"store) or a rank from 0 to {int(world_size) - 1} of the world of {int(world_size)}"
            )
        self._liveness = torch.classes.bload.Liveness(
            host,
            int(port),
            int(rank),
            int(world_size),
            float(window),
            float(join_timeout),
            int(store_rank),
            prefix,
            bool(act),
        )

    def started(self):
        """Ready for the first collective: a failure from here on is not a start-up failure."""
        self._liveness.started()

    def advance(self):
        """Before each batch's collectives: lets the others tell a rank stuck before a batch."""
        self._liveness.advance()

    def failed(self, error):
        """This rank stops on an error of its own (`error`). Before started(), every rank is
        told it, as "rank R failed at start-up, before the agreement check: ERROR", and it
        returns "". After (most often a collective that failed), it returns the other ranks whose
        heartbeat stopped without a mark of their own, "rank 1 lost (no heartbeat for 3.0 s)", or
        "", having watched them for 3 s."""
        return self._liveness.failed(str(error))

    def finished(self):
        """A clean end: no rank names this one lost once its heartbeat stops."""
        self._liveness.finished()

    def fault(self):
        """What the watchdog found, or ""."""
        return self._liveness.fault()
