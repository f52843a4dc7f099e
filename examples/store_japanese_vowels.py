"""A real public data set, packed from a sequence store: UCI's Japanese Vowels (Kudo, Toyama and
Shimbo, 1999; 640 utterances of /ae/ by 9 speakers, each 7 to 29 frames of 12 LPC cepstrum
coefficients), as the sktime package ships it (pip install sktime; no download at run time).

The utterances are written to a store (bload.store.write, streaming one at a time), read back by
bload.SequenceStore, and packed into blocks of 16 frames by BlockSampler and BlockDataset in two
DataLoader workers, each target frame the speaker's number. It checks that every frame was
packed exactly once, as the store holds it, and prints what the packing cost:

    python examples/store_japanese_vowels.py [DIR]
"""

import sys
import tempfile

import bload
import numpy as np
import torch

COLUMN = bload.ops.COLUMN
NAMES = ("block", "block_offset", "length", "sequence", "offset")


def utterances():
    """(frames [T, 12] float32, speaker [T] int64) per utterance, training and test sets."""
    from sktime.datasets import load_japanese_vowels

    frames, speakers = load_japanese_vowels(return_type="pd-multiindex")
    for (_, utterance), speaker in zip(frames.groupby(level=0, sort=False), speakers):
        data = utterance.to_numpy(np.float32)
        yield data, np.full(len(data), int(speaker), np.int64)


def pack(directory, t_max=16, workers=2):
    """Writes the store under `directory`, packs one epoch from it, and returns its counts."""
    store = bload.SequenceStore(
        bload.store.write(f"{directory}/japanese_vowels", utterances(), total=640)
    )
    sampler = bload.BlockSampler(store.lengths, t_max=t_max, blocks_per_batch=8, split=True)
    loader = torch.utils.data.DataLoader(
        bload.BlockDataset(store, t_max=t_max),
        batch_sampler=sampler,
        collate_fn=bload.collate,
        num_workers=workers,
    )
    packed = torch.zeros(int(store.lengths.sum()), dtype=torch.int64)  # times each frame was packed
    starts = torch.cat([torch.zeros(1, dtype=torch.int64), store.lengths.cumsum(0)])
    slots = 0
    for batch in loader:
        slots += batch.valid.numel()
        for row in batch.table.tolist():
            block, at, length, sequence, offset = (row[COLUMN[name]] for name in NAMES)
            data, _ = store.get_range(sequence, offset, length)
            assert torch.equal(batch.data[block, at : at + length], data)
            packed[starts[sequence] + offset : starts[sequence] + offset + length] += 1
    return {
        "sequences": len(store),
        "frames": int(store.lengths.sum()),
        "longest": int(store.lengths.max()),
        "batches": len(sampler),
        "slots": slots,
        "packed_once": bool((packed == 1).all()),
        "store": store,
    }


def main(directory):
    counts = pack(directory)
    print(counts.pop("store"))
    print(
        f"{counts['frames']} frames of {counts['sequences']} utterances (longest {counts['longest']}) in "
        f"{counts['batches']} batches of 8 x 16 frames: {counts['frames'] / counts['slots']:.1%} of the slots "
        f"hold a frame; every frame packed once: {counts['packed_once']}"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as directory:
            main(directory)
