"""Writes the TorchScript reference that tests/tch_pack.rs compares bload::tch with: the C++
plugin's own operators (what bload::BlockDataset packs with) and torch.classes.bload.Planner's
block tables. Run by `make test-tch`:

    .venv/bin/python tests/tch_reference.py build/tch_reference.pt
"""

import sys
from typing import List, Tuple

import bload  # noqa: F401  (loads torch.ops.bload, which the reference calls)
import torch


class Reference(torch.nn.Module):
    def __init__(
        self,
        lengths: torch.Tensor,
        t_max: int,
        blocks_per_batch: int,
        world_size: int,
        seed: int,
        policy: str,
    ):
        super().__init__()
        self.planner = torch.classes.bload.Planner(
            lengths,
            t_max,
            blocks_per_batch=blocks_per_batch,
            world_size=world_size,
            seed=seed,
            policy=policy,
            split_oversized=True,
        )
        self.blocks, self.t_max, self.planned_lengths = blocks_per_batch, t_max, lengths

    @torch.jit.export
    def lengths(self) -> torch.Tensor:
        return self.planned_lengths

    @torch.jit.export
    def batches_per_rank(self, epoch: int) -> int:
        return self.planner.batches_per_rank(epoch)

    @torch.jit.export
    def table(self, epoch: int, rank: int, index: int) -> torch.Tensor:
        return self.planner.batch(epoch, rank, index)

    def forward(
        self,
        data: List[torch.Tensor],
        target: List[torch.Tensor],
        table: torch.Tensor,
        data_padding: float,
        target_padding: float,
    ) -> Tuple[
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
    ]:
        return (
            torch.ops.bload.pack(data, table, self.blocks, self.t_max, data_padding),
            torch.ops.bload.pack(target, table, self.blocks, self.t_max, target_padding),
            torch.ops.bload.reset_mask(table, self.blocks, self.t_max),
            torch.ops.bload.valid_mask(table, self.blocks, self.t_max),
            torch.ops.bload.segment_ids(table, self.blocks, self.t_max),
            torch.ops.bload.position_ids(table, self.blocks, self.t_max),
            torch.ops.bload.cu_seqlens(table),
        )


def main():
    lengths = torch.randint(1, 60, (300,), generator=torch.Generator().manual_seed(7))
    # t_max 48 < the longest: some sequences are split, so pieces with offsets are covered too.
    module = torch.jit.script(Reference(lengths, 48, 4, 3, 11, "best_fit"))
    module.save(sys.argv[1])


if __name__ == "__main__":
    main()
