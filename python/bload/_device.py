"""Moving the tensors bload makes on the host (a batch's tables, a BlockMask's tiles, the dense
mask) to the batch's device."""

import torch


def host_to_device(tensor, device):
    """`tensor`, made on the host, on `device`. On CUDA through pinned memory, non_blocking: the
    copy is queued on the current stream behind its work. A copy from pageable memory would wait
    for that work first, so a thread preparing the next batch (bload.DevicePrefetcher) would wait
    for the running step; the pinned block is not reused before its copy is done (torch's caching
    host allocator records the copy)."""
    device = torch.device(device)
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
