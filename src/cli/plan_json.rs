//! `bload plan --json`: one line of JSON, written batch by batch.
//!
//! A rank's batches of a large dataset make a document of hundreds of megabytes; it is never held
//! in memory, only one piece at a time. The bytes are those of the whole document built as one
//! `serde_json::Value` (what this command printed before it streamed, and what the test below
//! still builds): fields in the order of a `serde_json::Map`, compact, and a newline.

use bload::{Batch, EpochPlan, SourceStats};
use serde_json::{json, Map, Value};
use std::io::{self, Write};

/// The field the batches go in; the others are small and written whole.
const BATCHES: &str = "batches";

/// Writes `rank`'s `batches` of `plan` to `out`.
pub fn write<'a>(
    out: &mut impl Write,
    plan: &EpochPlan,
    sources: &[SourceStats],
    rank: u32,
    batches: impl Iterator<Item = Batch<'a>>,
) -> io::Result<()> {
    let o = plan.options();
    let mut fields = Map::new();
    fields.insert("rank".into(), json!(rank));
    fields.insert("epoch".into(), json!(plan.epoch()));
    fields.insert("world_size".into(), json!(o.world_size));
    fields.insert("blocks_per_batch".into(), json!(o.blocks_per_batch));
    fields.insert("t_max".into(), json!(o.t_max));
    fields.insert("policy".into(), json!(o.policy));
    if let Some(cap) = o.max_pieces {
        fields.insert("max_pieces".into(), json!(cap));
    }
    fields.insert("plan_hash".into(), json!(format!("{:#018x}", plan.hash())));
    fields.insert("stats".into(), json!(plan.stats()));
    if !sources.is_empty() {
        // A mixture's: what each source gave the epoch (sequences numbered in --source order).
        fields.insert("sources".into(), json!(sources));
    }
    // A stand-in, so that the batches are written where the map orders their field.
    fields.insert(BATCHES.into(), Value::Null);
    let mut batches = Some(batches);

    out.write_all(b"{")?;
    for (number, (key, value)) in fields.iter().enumerate() {
        if number > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, key)?;
        out.write_all(b":")?;
        match batches.take_if(|_| key == BATCHES) {
            Some(batches) => write_batches(out, batches)?,
            None => serde_json::to_writer(&mut *out, value)?,
        }
    }
    out.write_all(b"}\n")
}

fn write_batches<'a>(
    out: &mut impl Write,
    batches: impl Iterator<Item = Batch<'a>>,
) -> io::Result<()> {
    out.write_all(b"[")?;
    for (number, batch) in batches.enumerate() {
        if number > 0 {
            out.write_all(b",")?;
        }
        write_batch(out, &batch)?;
    }
    out.write_all(b"]")
}

/// One batch: its blocks, each with its padding and pieces, written a piece at a time (a batch
/// may hold every block of the epoch, `--blocks-per-batch` being the user's), as
/// `{"blocks": [{"padding": P, "pieces": [...]}, ...]}` would be.
fn write_batch(out: &mut impl Write, batch: &Batch) -> io::Result<()> {
    out.write_all(b"{\"blocks\":[")?;
    for (number, block) in batch.blocks().enumerate() {
        if number > 0 {
            out.write_all(b",")?;
        }
        write!(out, "{{\"padding\":{},\"pieces\":[", block.padding())?;
        for (number, piece) in block.pieces().enumerate() {
            if number > 0 {
                out.write_all(b",")?;
            }
            serde_json::to_writer(&mut *out, &json!(piece))?;
        }
        out.write_all(b"]}")?;
    }
    out.write_all(b"]}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bload::{Options, Oversize, Planner, Policy};

    /// The document as the command built it before it streamed: one `Value`.
    fn whole_document(plan: &EpochPlan, rank: u32) -> String {
        let o = plan.options();
        let batches: Vec<_> = plan
            .rank_batches(rank)
            .unwrap()
            .map(|batch| {
                let blocks: Vec<_> = batch
                    .blocks()
                    .map(|block| {
                        let pieces: Vec<_> = block.pieces().collect();
                        json!({"padding": block.padding(), "pieces": pieces})
                    })
                    .collect();
                json!({ "blocks": blocks })
            })
            .collect();
        let out = json!({
            "rank": rank,
            "epoch": plan.epoch(),
            "world_size": o.world_size,
            "blocks_per_batch": o.blocks_per_batch,
            "t_max": o.t_max,
            "policy": o.policy,
            "plan_hash": format!("{:#018x}", plan.hash()),
            "stats": plan.stats(),
            "batches": batches,
        });
        format!("{out}\n")
    }

    fn streamed(plan: &EpochPlan, rank: u32) -> String {
        let mut out = Vec::new();
        write(&mut out, plan, &[], rank, plan.rank_batches(rank).unwrap()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn streaming_writes_the_bytes_of_the_whole_document() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/data/action_genome_like.lengths"
        );
        let lengths = bload::read_lengths(std::path::Path::new(path)).unwrap();
        let mut options = Options::new(94);
        options.world_size = 3;
        options.blocks_per_batch = 4;
        let plan = Planner::new(lengths, options).unwrap().plan(2).unwrap();
        for rank in 0..3 {
            let text = streamed(&plan, rank);
            assert_eq!(text, whole_document(&plan, rank), "rank {rank}");
            assert!(text.len() > 100_000, "a document of many batches");
        }
    }

    #[test]
    fn split_pieces_and_empty_blocks_stream_alike() {
        // 25 and 30 steps split into 2 and 3 chunks, 25 with a tail: 7 pieces, a block each with
        // pad_to_max, which 2 ranks round up to 8 blocks, one of them empty.
        let mut options = Options::new(10);
        options.world_size = 2;
        options.oversize = Oversize::Split;
        options.policy = Policy::PadToMax;
        let plan = Planner::new(vec![25, 3, 30], options)
            .unwrap()
            .plan(0)
            .unwrap();
        assert_eq!(plan.stats().empty_blocks, 1);
        let texts: Vec<String> = (0..2).map(|rank| streamed(&plan, rank)).collect();
        for (rank, text) in (0..).zip(&texts) {
            assert_eq!(*text, whole_document(&plan, rank), "rank {rank}");
        }
        assert!(texts.iter().any(|text| text.contains("\"continues\":true")));
    }
}
