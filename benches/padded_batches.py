"""The padded loader's collate that the benches compare bload with: each batch's (data, target)
items padded to the batch's longest sequence by torch's pad_sequence, the targets with -100 (the
index cross-entropy ignores), as most training code does. Imported by the benches beside it (a
script's own folder is on its import path)."""

import torch
from torch.nn.utils.rnn import pad_sequence


def pad_collate(items):
    """(data, target), each [batch, longest, ...]."""
    data = pad_sequence([data for data, _ in items], batch_first=True)
    target = pad_sequence([target for _, target in items], batch_first=True, padding_value=-100)
    return data, target


def pad_collate_with_mask(items):
    """(data, target, valid): pad_collate's, and the [batch, longest] mask of the real steps."""
    data, target = pad_collate(items)
    lengths = torch.tensor([len(data) for data, _ in items])
    valid = torch.arange(data.size(1))[None, :] < lengths[:, None]
    return data, target, valid
