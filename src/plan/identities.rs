//! Which sequence fills each slot of a packing.
//!
//! The packers see only how many sequences have each packed length (see `pack/`), which keeps
//! them fast on millions of sequences; they return a slot per piece holding just its length. Here
//! each slot gets a sequence of that length, drawn per epoch, so the plan stays a pure function
//! of (lengths, options, epoch).

use super::scatter::scatter;
use super::Planner;
use crate::alloc::{try_copy, try_with_capacity_to_scatter};
use crate::error::Result;
use crate::rng::{PlanRng, Stream};

impl Planner {
    /// Which sequence fills each packed slot. Sequences whose packed parts have the same length
    /// are interchangeable to the packer; shuffling them per epoch changes the company each
    /// sequence keeps in its block from epoch to epoch.
    ///
    /// Works in place: each packed length is replaced by the sequence that fills it.
    pub(super) fn sequences_for(&self, mut slots: Vec<u32>, epoch: u64) -> Result<Vec<u32>> {
        // Counting sort by packed length (ascending index within a length). Done per epoch
        // rather than kept: it costs about what copying a kept one would, and saves the memory.
        let t_max = self.options.t_max;
        let starts = &self.class_starts;
        let packed = starts[t_max as usize + 1] as usize;
        let mut members = try_with_capacity_to_scatter(MEMBERS, packed, packed)?;
        let index = |at: usize, _| at as u32;
        if self.oversized.is_empty() {
            // Every sequence is packed whole: its length is its packed part.
            let key = |length| Some(length as usize);
            scatter(&self.lengths, starts, key, index, &mut members)?;
        } else {
            let key = |length| Some(packed_part(length, t_max) as usize).filter(|&part| part > 0);
            scatter(&self.lengths, starts, key, index, &mut members)?;
        }
        let mut next = try_copy("the next sequence of each length", starts)?;
        // Shuffle each length's run, then hand its members out in order. (Drawing lazily as
        // slots come up would touch every run at random and miss the cache on each slot.)
        let mut rng = PlanRng::new(self.options.seed, epoch, Stream::Identities);
        for run in starts.windows(2) {
            let run = &mut members[run[0] as usize..run[1] as usize];
            // Read in order first: the scatter left the run in memory, where each of the
            // shuffle's reads at random would wait for its line in turn (runs below the
            // megabyte draw no picks ahead, `PlanRng::shuffle`); read in order, the lines stream
            // into the cache together. On Graphcore's Wikipedia histogram (runs of up to 300 KB,
            // one of 15 MB) the shuffles took about 65 ms instead of 100.
            std::hint::black_box(run.iter().fold(0, |any, &member| any ^ member));
            rng.shuffle(run);
        }
        for slot in &mut slots {
            let length = *slot as usize;
            *slot = members[next[length] as usize];
            next[length] += 1;
        }
        Ok(slots)
    }
}

/// What the sorted sequences are called when there is no memory for them.
const MEMBERS: &str = "the sequences sorted by length";

/// The part of a sequence that the packers place: all of it, or for one longer than `t_max`, the
/// tail left after cutting full `t_max` chunks (0 when it divides exactly).
pub(super) fn packed_part(length: u32, t_max: u32) -> u32 {
    if length > t_max {
        length % t_max
    } else {
        length
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Options, Oversize};

    #[test]
    fn packed_part_is_the_whole_sequence_or_its_tail() {
        assert_eq!(packed_part(1, 10), 1);
        assert_eq!(packed_part(10, 10), 10);
        assert_eq!(packed_part(11, 10), 1);
        assert_eq!(packed_part(27, 10), 7);
        assert_eq!(packed_part(30, 10), 0);
    }

    fn planner(lengths: Vec<u32>) -> Planner {
        let mut options = Options::new(10);
        options.oversize = Oversize::Split;
        Planner::new(lengths, options).unwrap()
    }

    /// Every sequence with a packed part, as its slot, in a mixed order.
    fn slots_of(lengths: &[u32]) -> Vec<u32> {
        let mut slots: Vec<u32> = lengths
            .iter()
            .map(|&length| packed_part(length, 10))
            .filter(|&part| part > 0)
            .collect();
        slots.reverse();
        let third = slots.len() / 3;
        slots.rotate_left(third);
        slots
    }

    #[test]
    fn fills_every_slot_with_a_distinct_sequence_of_its_length() {
        let lengths: Vec<u32> = (0..200).map(|i| 1 + (i * 7) % 23).collect();
        let planner = planner(lengths.clone());
        let slots = slots_of(&lengths);
        let sequences = planner.sequences_for(slots.clone(), 4).unwrap();
        assert_eq!(sequences.len(), slots.len());
        for (&slot, &index) in slots.iter().zip(&sequences) {
            assert_eq!(packed_part(lengths[index as usize], 10), slot);
        }
        // A permutation of the sequences that have a packed part (those of 20 have none).
        let mut sorted = sequences.clone();
        sorted.sort_unstable();
        let expected: Vec<u32> = (0u32..)
            .zip(&lengths)
            .filter(|&(_, &length)| packed_part(length, 10) > 0)
            .map(|(index, _)| index)
            .collect();
        assert_eq!(sorted, expected);
        assert!(expected.len() < lengths.len());
    }

    #[test]
    fn sequences_of_one_length_are_shuffled_per_epoch_only() {
        let lengths = vec![3; 64];
        let planner = planner(lengths.clone());
        let slots = slots_of(&lengths);
        let epoch_0 = planner.sequences_for(slots.clone(), 0).unwrap();
        assert_eq!(planner.sequences_for(slots.clone(), 0).unwrap(), epoch_0);
        assert_ne!(planner.sequences_for(slots, 1).unwrap(), epoch_0);
    }

    #[test]
    fn a_sequence_with_a_unique_packed_length_always_gets_its_slot() {
        // 24's tail of 4 and 9 are unique; the 5s trade places.
        let lengths = vec![5, 24, 5, 9, 5];
        let planner = planner(lengths);
        for epoch in 0..4 {
            let sequences = planner.sequences_for(vec![9, 5, 4, 5, 5], epoch).unwrap();
            assert_eq!((sequences[0], sequences[2]), (3, 1));
            let mut fives = [sequences[1], sequences[3], sequences[4]];
            fives.sort_unstable();
            assert_eq!(fives, [0, 2, 4]);
        }
    }
}
