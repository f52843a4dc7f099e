"""Run by test_ray.py in a process of its own: Ray started and shut down several times, each
session iterating a RayLoader fully, partly (a loop left by `break`) and closed mid-batch, then
shut down at once. A thread of ours or of Ray Data that touched Ray after ray.shutdown() would end
this process ("The core worker has already been shutdown ... The process will exit"), so the test
reads its exit status and its last line."""

import sys
import time

import bload
import bload.ray
import ray
import torch

T_MAX, BLOCKS = 16, 2
LENGTHS = torch.randint(1, 17, (40,), generator=torch.Generator().manual_seed(5)).tolist()


def clip(index):
    return torch.full((LENGTHS[index], 2), float(index)), torch.zeros(LENGTHS[index])


def main(rounds):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for round in range(rounds):
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        sampler = bload.BlockSampler(LENGTHS, T_MAX, BLOCKS, seed=round)
        loader = bload.ray.RayLoader(sampler, clip)
        assert len(list(loader)) == len(sampler)
        for _ in loader:
            break
        batches = iter(loader)
        next(batches)
        loader.close()
        ray.shutdown()
        # The crash this guards against came 17 ms after shutdown, from another thread.
        time.sleep(0.5)
        print(f"round {round} survived", flush=True)
    print("every round survived", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
