"""What the tests of bload.integrations share: a numbered dataset whose data names each step
(sequence * 1000 + step), so a batch shows which steps it packed, and the plan's tables to
compare a framework's batches with."""

import bload  # noqa: F401  (loads the library: torch.classes.bload)
import torch

T_MAX, BLOCKS, SEED = 40, 2, 7


def lengths_of(count, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, T_MAX + 1, (count,), generator=generator).tolist()


class Numbered(torch.utils.data.Dataset):
    """Sequence i: data [T_i, 1] of i * 1000 + step, target [T_i] of the step."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, index):
        steps = torch.arange(self.lengths[index])
        return (steps + 1000 * index).float()[:, None], steps


def plan_tables(lengths, world_size, rank, epoch):
    """The block tables of `rank`'s batches of `epoch`, from the core's planner directly."""
    planner = torch.classes.bload.Planner(
        torch.tensor(lengths), T_MAX, blocks_per_batch=BLOCKS, world_size=world_size, seed=SEED
    )
    return [planner.batch(epoch, rank, index) for index in range(planner.batches_per_rank(epoch))]
