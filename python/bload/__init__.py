"""bload: packs variable-length sequences into fixed blocks of t_max steps for data-parallel
training. Every rank runs the same number of identically shaped batches, nothing is deleted,
and padding is near the least possible.

    sampler = bload.BlockSampler("lengths.txt", t_max=94, blocks_per_batch=8)
    loader = DataLoader(bload.BlockDataset(dataset, t_max=94), batch_sampler=sampler,
                        collate_fn=bload.collate, num_workers=2)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:   # a bload.PackedBatch: data, target, reset, valid, ...
            ...

`import bload` loads libbload.so into torch (torch.ops.bload, torch.classes.bload) once per
process; bload.library_path() names it for C++ and TorchScript users. bload.nn holds models for
packed blocks (PackedGRU, a recurrent model that resets where each sequence starts).
"""

from bload import _library, distributed, nn, ops, store
from bload._library import library_path
from bload.batch import PackedBatch
from bload.dataset import BlockDataset, collate
from bload.device_prefetch import DevicePrefetcher
from bload.hf import HFSequences
from bload.isolation import IsolationReport, assert_isolated, check_isolation
from bload.item_pool import ItemPool
from bload.labels import causal_labels
from bload.lanes import LaneState
from bload.lengths import read_lengths, write_lengths_cache
from bload.mixture import Source
from bload.sampler import POLICIES, BlockBatch, BlockSampler, PlanHash
from bload.sequence_store import SequenceStore, StoreError

__all__ = [
    "BlockBatch",
    "BlockDataset",
    "BlockSampler",
    "DevicePrefetcher",
    "HFSequences",
    "IsolationReport",
    "ItemPool",
    "LaneState",
    "PackedBatch",
    "POLICIES",
    "PlanHash",
    "SequenceStore",
    "Source",
    "StoreError",
    "assert_isolated",
    "causal_labels",
    "check_isolation",
    "collate",
    "distributed",
    "library_path",
    "nn",
    "ops",
    "read_lengths",
    "store",
    "write_lengths_cache",
]


def _version():
    """bload's version, as the loaded libbload.so says it (bload::version(), through its C entry
    point). The version has one home, Cargo.toml, which CMake compiles into the library: asking
    the library keeps no copy here, and names the build that actually runs (one from
    BLOAD_LIBRARY too)."""
    import ctypes

    version = ctypes.CDLL(_library.load()).bload_version
    version.restype = ctypes.c_char_p
    return version().decode()


__version__ = _version()
