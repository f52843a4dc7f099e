//! What attention kernels want of a block table: the batch as documents (every piece, and every
//! run of padding, one document of its own), their offsets over the flattened `[blocks * t_max]`
//! layout, the longest piece, flex_attention's kv-block tables and a dense block-diagonal mask.
//! All of them follow from the table alone, on the host, so a loader makes them beside the batch
//! and no kernel reads a device tensor to learn them.

use super::{BlockTable, Column};
use crate::error::{Error, Result};

/// What a batch's `position_ids` count from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Positions {
    /// The step's position in its sequence: a piece that continues a split sequence goes on
    /// counting from its offset (what a recurrent model carrying state across pieces wants).
    #[default]
    Sequence,
    /// The step's position in its piece, from 0 at each piece (what attention over documents
    /// that never see each other wants, and Hugging Face's `position_ids == 0` rule assumes).
    Piece,
}

impl Positions {
    pub const ALL: [Positions; 2] = [Positions::Sequence, Positions::Piece];

    /// The name the C++ `Options::positions`, Python's `positions=` and the operators take.
    pub const fn name(self) -> &'static str {
        match self {
            Positions::Sequence => "sequence",
            Positions::Piece => "piece",
        }
    }

    /// The positions called `name`; an error naming `positions` for any other.
    pub fn from_name(name: &str) -> Result<Self> {
        Positions::ALL
            .into_iter()
            .find(|positions| positions.name() == name)
            .ok_or_else(|| {
                Error::invalid(
                    "positions",
                    format!("{name:?}"),
                    "\"sequence\" or \"piece\"",
                )
            })
    }
}

/// A run of steps of the flattened `[blocks * t_max]` layout that is one document: a piece or a
/// run of padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Segment {
    /// First step, in the flattened layout.
    pub start: usize,
    /// One past the last step.
    pub end: usize,
}

/// How many entries `cu_seqlens_padded` has for a batch of `blocks` blocks and `pieces` pieces:
/// the most segments such a table can have (a run of padding before every piece and one after
/// the last of each block), plus one. The shape then follows from the table's size alone.
pub const fn padded_segments_bound(blocks: usize, pieces: usize) -> usize {
    2 * pieces + blocks + 1
}

impl BlockTable<'_> {
    /// The batch's documents in order over the flattened layout: every piece and every run of
    /// padding (inside a block, between its pieces or after them, and whole empty blocks).
    pub(super) fn segments(&self) -> Vec<Segment> {
        let mut segments = Vec::with_capacity(2 * self.rows().len() + self.blocks);
        let mut rows = self.rows().peekable();
        for block in 0..self.blocks {
            let base = block * self.t_max;
            let mut cursor = base;
            while let Some(row) = rows.next_if(|row| Column::Block.of(row) as usize == block) {
                let start = base + Column::BlockOffset.of(row) as usize;
                let end = start + Column::Length.of(row) as usize;
                if start > cursor {
                    segments.push(Segment {
                        start: cursor,
                        end: start,
                    });
                }
                segments.push(Segment { start, end });
                cursor = end;
            }
            if cursor < base + self.t_max {
                segments.push(Segment {
                    start: cursor,
                    end: base + self.t_max,
                });
            }
        }
        segments
    }

    /// The longest piece's steps (0 for a table of no row): varlen kernels' `max_seqlen`, known on
    /// the host when the batch is made.
    pub fn max_seqlen(&self) -> i64 {
        self.rows()
            .map(|row| Column::Length.of(row))
            .max()
            .unwrap_or(0)
    }

    /// Writes `document_ids` (`[blocks * t_max]`: the index of the step's segment, pieces and
    /// padding runs numbered in order over the flattened layout) and `cu_seqlens_padded` (the
    /// segments' offsets, then `blocks * t_max` repeated up to
    /// [`padded_segments_bound`] entries). Sizes are checked by the caller.
    pub(super) fn write_documents(&self, document_ids: &mut [i32], cu_seqlens_padded: &mut [i32]) {
        let segments = self.segments();
        // check_batch_shape() bounded blocks * t_max, so every offset and id fits i32.
        cu_seqlens_padded.fill((self.blocks * self.t_max) as i32);
        cu_seqlens_padded[0] = 0;
        for (id, segment) in segments.iter().enumerate() {
            document_ids[segment.start..segment.end].fill(id as i32);
            cu_seqlens_padded[id + 1] = segment.end as i32;
        }
    }

    /// `[blocks, t_max, t_max]` row-major: `true` where query step q may attend to key step k,
    /// both in the same document (piece or padding run), and with `causal` k <= q. A padding
    /// step attends to its own run, so no query row is all false (SDPA would give NaN there).
    pub fn write_attention_mask(&self, causal: bool, out: &mut [bool]) -> Result<()> {
        let expected = self.blocks * self.t_max * self.t_max;
        if out.len() != expected {
            return Err(Error::invalid(
                "attention_mask",
                format!("{} values", out.len()),
                format!(
                    "{expected} values, [blocks, t_max, t_max] = [{}, {}, {}]",
                    self.blocks, self.t_max, self.t_max
                ),
            ));
        }
        out.fill(false);
        for segment in self.segments() {
            let block = segment.start / self.t_max;
            let (start, end) = (
                segment.start % self.t_max,
                (segment.end - 1) % self.t_max + 1,
            );
            for q in start..end {
                let row = (block * self.t_max + q) * self.t_max;
                let last = if causal { q + 1 } else { end };
                out[row + start..row + last].fill(true);
            }
        }
        Ok(())
    }

    /// flex_attention's kv-block tables of the document mask (with `causal`, also k <= q), as
    /// `BlockMask.from_kv_blocks` takes them, for tiles of `block_size` steps: per row and query
    /// tile, the key tiles that are partly allowed and those wholly allowed, each list in
    /// ascending order, then zeros. `t_max` need not be a multiple of `block_size`: a tile that
    /// reaches past it is never full, as torch's `create_block_mask` decides.
    pub fn write_kv_blocks(
        &self,
        block_size: i64,
        causal: bool,
        out: KvBlocksMut<'_>,
    ) -> Result<()> {
        if block_size < 1 {
            return Err(Error::invalid("block_size", block_size, "at least 1 step"));
        }
        let size = block_size as usize;
        let tiles = self.t_max.div_ceil(size);
        let (counts, indices) = (self.blocks * tiles, self.blocks * tiles * tiles);
        for (name, len, expected) in [
            ("kv_num_blocks", out.kv_num_blocks.len(), counts),
            ("kv_indices", out.kv_indices.len(), indices),
            ("full_kv_num_blocks", out.full_kv_num_blocks.len(), counts),
            ("full_kv_indices", out.full_kv_indices.len(), indices),
        ] {
            if len != expected {
                return Err(Error::invalid(
                    name,
                    format!("{len} values"),
                    format!(
                        "{expected} values for {} blocks of {} tiles of {size} steps",
                        self.blocks, tiles
                    ),
                ));
            }
        }
        out.kv_num_blocks.fill(0);
        out.kv_indices.fill(0);
        out.full_kv_num_blocks.fill(0);
        out.full_kv_indices.fill(0);
        let segments = self.segments();
        // Segments of each block, as positions inside the block.
        let mut first = 0;
        for block in 0..self.blocks {
            let base = block * self.t_max;
            let mut last = first;
            while last < segments.len() && segments[last].start < base + self.t_max {
                last += 1;
            }
            let spans: Vec<(usize, usize)> = segments[first..last]
                .iter()
                .map(|s| (s.start - base, s.end - base))
                .collect();
            first = last;
            let mut segment = 0;
            for tile in 0..tiles {
                let (q_start, q_end) = (tile * size, ((tile + 1) * size).min(self.t_max));
                // The segments under this query tile are consecutive: from `segment` on.
                while spans[segment].1 <= q_start {
                    segment += 1;
                }
                let mut under = segment;
                while under + 1 < spans.len() && spans[under + 1].0 < q_end {
                    under += 1;
                }
                let (reach_start, reach_end) = (spans[segment].0, spans[under].1);
                // Key tiles overlapping the documents under the query tile; causal: none after it.
                let mut last_key = (reach_end - 1) / size;
                if causal {
                    last_key = last_key.min(tile);
                }
                // A tile wholly inside one document, and inside t_max, can be wholly allowed.
                let one_document = segment == under && q_end - q_start == size;
                let at = block * tiles + tile;
                let row = at * tiles;
                let (mut partial, mut full) = (0usize, 0usize);
                for key in reach_start / size..=last_key {
                    let (k_start, k_end) = (key * size, (key + 1) * size);
                    let wholly = one_document
                        && k_start >= spans[segment].0
                        && k_end <= spans[segment].1
                        && (!causal || q_start + 1 >= k_end);
                    if wholly {
                        out.full_kv_indices[row + full] = key as i32;
                        full += 1;
                    } else {
                        out.kv_indices[row + partial] = key as i32;
                        partial += 1;
                    }
                }
                out.kv_num_blocks[at] = partial as i32;
                out.full_kv_num_blocks[at] = full as i32;
            }
        }
        Ok(())
    }
}

/// The tiles of a query tile row: `[blocks, tiles]` counts and `[blocks, tiles, tiles]` indices
/// (flex_attention's layout with one head), for partly and wholly allowed key tiles.
pub struct KvBlocksMut<'o> {
    pub kv_num_blocks: &'o mut [i32],
    pub kv_indices: &'o mut [i32],
    pub full_kv_num_blocks: &'o mut [i32],
    pub full_kv_indices: &'o mut [i32],
}

#[cfg(test)]
mod tests {
    use super::*;

    // Block 0: a piece at 0 (2 steps), padding, a piece at 3 that continues its sequence from
    // offset 4 (2 steps), padding; block 1 empty. t_max 6.
    const CELLS: [i64; 12] = [0, 0, 2, 7, 0, 2, 0, 3, 2, 9, 4, 8];

    fn table() -> BlockTable<'static> {
        BlockTable::new(&CELLS, 2, 6).unwrap()
    }

    #[test]
    fn documents_number_pieces_and_padding_runs_in_flattened_order() {
        let mut tables = table().with_positions(Positions::Piece).step_tables(0);
        assert_eq!(tables.document_ids, [0, 0, 1, 2, 2, 3, 4, 4, 4, 4, 4, 4]);
        assert_eq!(tables.cu_seqlens_padded, [0, 2, 3, 5, 6, 12, 12]);
        assert_eq!(tables.position_ids, [0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        tables = table().step_tables(0);
        assert_eq!(tables.position_ids, [0, 1, 0, 4, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(table().max_seqlen(), 2);
        assert_eq!(BlockTable::new(&[], 1, 4).unwrap().max_seqlen(), 0);
        assert_eq!(Positions::from_name("piece").unwrap(), Positions::Piece);
        let error = Positions::from_name("pieces").unwrap_err().to_string();
        assert!(
            error.contains("positions") && error.contains("\"pieces\""),
            "{error}"
        );
    }

    /// The mask from document ids, step by step: what every faster form must equal.
    fn reference_mask(table: &BlockTable<'_>, causal: bool) -> Vec<bool> {
        let ids = table.step_tables(0).document_ids;
        let t = table.t_max();
        let mut mask = vec![false; table.blocks() * t * t];
        for b in 0..table.blocks() {
            for q in 0..t {
                for k in 0..t {
                    mask[(b * t + q) * t + k] =
                        ids[b * t + q] == ids[b * t + k] && (!causal || k <= q);
                }
            }
        }
        mask
    }

    #[test]
    fn attention_mask_is_the_document_mask() {
        for causal in [false, true] {
            let mut mask = vec![true; 2 * 6 * 6];
            table().write_attention_mask(causal, &mut mask).unwrap();
            assert_eq!(mask, reference_mask(&table(), causal));
        }
        let error = table()
            .write_attention_mask(true, &mut [false; 3])
            .unwrap_err()
            .to_string();
        assert!(error.contains("attention_mask"), "{error}");
    }

    #[test]
    fn kv_blocks_are_the_tiles_of_the_document_mask() {
        // Full blocks, split pieces, gaps and a t_max that tiles do not divide.
        let cells: Vec<i64> = [
            [0, 0, 4, 0, 0, 4],
            [0, 4, 5, 1, 0, 9],
            [0, 9, 1, 2, 0, 1],
            [1, 0, 10, 3, 2, 20],
            [2, 3, 4, 4, 0, 4],
        ]
        .concat();
        let table = BlockTable::new(&cells, 3, 10).unwrap();
        for causal in [false, true] {
            let mask = reference_mask(&table, causal);
            for size in [1usize, 2, 3, 4, 7, 16] {
                let tiles = 10usize.div_ceil(size);
                let (mut num, mut idx) = (vec![0; 3 * tiles], vec![0; 3 * tiles * tiles]);
                let (mut full_num, mut full_idx) = (num.clone(), idx.clone());
                let out = KvBlocksMut {
                    kv_num_blocks: &mut num,
                    kv_indices: &mut idx,
                    full_kv_num_blocks: &mut full_num,
                    full_kv_indices: &mut full_idx,
                };
                table.write_kv_blocks(size as i64, causal, out).unwrap();
                for b in 0..3 {
                    for qt in 0..tiles {
                        let at = b * tiles + qt;
                        let listed = |count: &[i32], list: &[i32]| -> Vec<usize> {
                            list[at * tiles..at * tiles + count[at] as usize]
                                .iter()
                                .map(|&k| k as usize)
                                .collect()
                        };
                        let (mut partial, mut full) = (vec![], vec![]);
                        for kt in 0..tiles {
                            let (mut any, mut all) = (false, true);
                            for q in qt * size..(qt + 1) * size {
                                for k in kt * size..(kt + 1) * size {
                                    let allowed = q < 10 && k < 10 && mask[(b * 10 + q) * 10 + k];
                                    any |= allowed;
                                    all &= allowed;
                                }
                            }
                            if all {
                                full.push(kt);
                            } else if any {
                                partial.push(kt);
                            }
                        }
                        assert_eq!(
                            listed(&num, &idx),
                            partial,
                            "causal {causal} size {size} row {b} tile {qt}"
                        );
                        assert_eq!(
                            listed(&full_num, &full_idx),
                            full,
                            "causal {causal} size {size} row {b} tile {qt}"
                        );
                    }
                }
            }
        }
        let empty = KvBlocksMut {
            kv_num_blocks: &mut [],
            kv_indices: &mut [],
            full_kv_num_blocks: &mut [],
            full_kv_indices: &mut [],
        };
        let error = table
            .write_kv_blocks(0, true, empty)
            .unwrap_err()
            .to_string();
        assert!(error.contains("block_size = 0"), "{error}");
    }
}
