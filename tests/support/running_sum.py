"""The running-sum data set of the DDP harness and the tests: its one Python home. The C++ twin is
running_sum.h beside this file; examples/tch_trainer.rs follows the same definition in Rust
(seeding torch's default generator, tch::manual_seed, then randn). tests/python/
test_running_sum.py checks the definition and that drawing, and tests/python/test_ddp.py that the
C++ and Python trainers see the same losses from it.

Sequence i of length T_i, for a run seeded by `seed`:

- features x, float32 [T_i, 16]: `randn` from torch's CPU generator (mt19937) seeded with
  `seed * 1000003 + i` (`sequence_seed`), drawn as one [T_i, 16] tensor;
- target y, float32 [T_i, 1]: y_t = (x_0[0] + ... + x_t[0]) / sqrt(t + 1), a scaled running sum of
  the first feature: a model has to carry state along a sequence and start each one afresh.
"""

import torch

FEATURES = 16
SEED_STRIDE = 1000003  # sequence i of seed s draws from seed s * SEED_STRIDE + i


def sequence_seed(seed, index):
    """The generator seed of sequence `index` in a run seeded by `seed`."""
    return seed * SEED_STRIDE + index


class RunningSum(torch.utils.data.Dataset):
    """Sequence i: (features [T_i, 16], target [T_i, 1]), as the module's docstring defines."""

    def __init__(self, lengths, seed):
        self.lengths, self.seed = lengths, seed
        self.generator = torch.Generator()  # reseeded per sequence: cheaper than a new one
        self.roots = torch.arange(1, max(lengths, default=1) + 1).sqrt().unsqueeze(1)  # sqrt(t + 1)

    def __getstate__(self):
        # Without the generator, which is reseeded per sequence anyway: torch's shared-memory
        # pickling of a Generator fails in a spawned DataLoader worker ("unable to resize file
        # ... Invalid argument"), where CUDA trainers' workers are spawned (tests/gpu/run.sh's
        # feed steps failed so on the first GPU run).
        return {key: value for key, value in self.__dict__.items() if key != "generator"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.generator = torch.Generator()

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, index):
        steps = self.lengths[index]
        self.generator.manual_seed(sequence_seed(self.seed, index))
        features = torch.randn(steps, FEATURES, generator=self.generator)
        target = features[:, :1].cumsum(0).div_(self.roots[:steps])
        return features, target
