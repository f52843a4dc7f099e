//! Plans two epochs of the bundled Action-Genome-shaped data for 8 DDP ranks, as each rank
//! would on its own, and prints what rank 3 gets.
//!
//!     cargo run --release --example plan_epoch

use bload::{read_lengths, Options, Oversize, Planner};

fn main() -> Result<(), bload::Error> {
    let lengths = read_lengths("examples/data/action_genome_like.lengths".as_ref())?;
    let mut options = Options::new(94); // t_max: steps per block
    options.world_size = 8; // DDP ranks
    options.blocks_per_batch = 4; // blocks per batch, per rank
    options.seed = 1234;
    options.oversize = Oversize::Split; // cut sequences longer than t_max (default: refuse)
    let planner = Planner::new(lengths, options)?; // checks everything once

    let rank = 3;
    for epoch in 0..2 {
        let plan = planner.plan(epoch)?; // the same on every rank: no communication
        println!(
            "epoch {epoch}: plan {:#018x}, {} batches per rank, {} padding steps (bound {})",
            plan.hash(), // ranks can all-gather this to check they agree
            plan.batches_per_rank(),
            plan.stats().padding,
            plan.stats().lower_bound.padding,
        );
        let first = plan.rank_batches(rank)?.next().expect("at least one batch");
        for block in first.blocks() {
            // Each piece: steps offset..offset + length of sequence `index`, at block_offset.
            let pieces: Vec<String> = block
                .pieces()
                .map(|p| format!("{}:{}+{}", p.index, p.offset, p.length))
                .collect();
            println!(
                "  block: {} | padding {}",
                pieces.join(" "),
                block.padding()
            );
        }
        let tables = first.tables(); // [blocks, t_max], row-major
        let resets: Vec<usize> = (0..tables.t_max).filter(|&t| tables.reset[t]).collect();
        println!("  first block resets at steps {resets:?}");
        println!("  cu_seqlens {:?}", tables.cu_seqlens);
    }
    Ok(())
}
