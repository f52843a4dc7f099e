//! Shortest-pack-first histogram-packing (SPFHP), written here from its description in Krell et
//! al., "Efficient Sequence Packing without Cross-contamination" (arXiv 2107.02027, section 4
//! and appendix): the packer that `benches/records.rs` runs beside bload on the histograms the
//! paper reports figures for.
//!
//! It works on the histogram, not on the sequences: lengths are taken from the longest to the
//! shortest, and all sequences of one length at once. Packs are kept as groups of identical
//! packs (a strategy, the lengths in it, and how many packs follow it), filed by the room they
//! have left. A length goes to the shortest pack that takes it, the group with the most room
//! (the "shortest pack first" of the name); when that group has fewer packs than there are
//! sequences of the length, all of its packs take one and the rest go on to the next shortest;
//! where no group has room, a new group of packs opens with the length. A group that is full, or
//! holds `max_sequences_per_pack` sequences, is closed. Among groups with the same room, the
//! one filed last is used first. With at most 12 sequences a pack this gives 99.6040% on the
//! Wikipedia histogram, the figure the paper's authors publish for their SPFHP.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Identical packs: the lengths in each, and how many packs there are.
#[derive(Debug, Clone)]
pub struct Strategy {
    pub lengths: Vec<u32>,
    pub count: u64,
}

/// SPFHP of `counts[length]` sequences of each length `1..=t_max`, at most
/// `max_sequences_per_pack` a pack: the strategies and their counts.
pub fn spfhp(counts: &[u64], t_max: u32, max_sequences_per_pack: usize) -> Vec<Strategy> {
    // open[room]: the open groups with `room` steps left, filed in order.
    let mut open: Vec<Vec<Strategy>> = vec![Vec::new(); t_max as usize + 1];
    let mut closed = Vec::new();
    let mut file = |group: Strategy, room: u32, open: &mut Vec<Vec<Strategy>>| {
        if room == 0 || group.lengths.len() >= max_sequences_per_pack {
            closed.push(group);
        } else {
            open[room as usize].push(group);
        }
    };
    for length in (1..=t_max).rev() {
        let mut left = counts[length as usize];
        while left > 0 {
            let fit = (length..=t_max)
                .rev()
                .find(|&room| !open[room as usize].is_empty());
            let Some(room) = fit else {
                let group = Strategy {
                    lengths: vec![length],
                    count: left,
                };
                file(group, t_max - length, &mut open);
                break;
            };
            let mut group = open[room as usize].pop().expect("a group with this room");
            let taken = left.min(group.count);
            let mut grown = Strategy {
                lengths: group.lengths.clone(),
                count: taken,
            };
            grown.lengths.push(length);
            if group.count > taken {
                // The packs of the group that take none of this length stay where they were.
                group.count -= taken;
                open[room as usize].push(group);
            }
            file(grown, room - length, &mut open);
            left -= taken;
        }
    }
    closed.extend(open.into_iter().flatten());
    closed
}

/// Every sequence given its pack, as SPFHP's users do after packing the histogram: sequence
/// indices by length, handed out to the strategies' slots. Packs are runs of `sequences`, each
/// ending at its entry in `ends`.
pub struct Assignment {
    pub sequences: Vec<u32>,
    pub ends: Vec<u64>,
}

pub fn assign(strategies: &[Strategy], lengths: &[u32], t_max: u32) -> Assignment {
    let (by_length, mut next) = sorted_by_length(lengths, t_max);
    let packs: u64 = strategies.iter().map(|s| s.count).sum();
    let mut assignment = Assignment {
        sequences: Vec::with_capacity(lengths.len()),
        ends: Vec::with_capacity(packs as usize),
    };
    for strategy in strategies {
        for _ in 0..strategy.count {
            for &length in &strategy.lengths {
                assignment.sequences.push(by_length[next[length as usize]]);
                next[length as usize] += 1;
            }
            assignment.ends.push(assignment.sequences.len() as u64);
        }
    }
    assignment
}

/// The sequences ordered by length (a counting sort), and where each length's run starts
/// (`starts[length]`, the last entry the count of sequences).
fn sorted_by_length(lengths: &[u32], t_max: u32) -> (Vec<u32>, Vec<usize>) {
    let mut starts = vec![0usize; t_max as usize + 2];
    for &length in lengths {
        starts[length as usize + 1] += 1;
    }
    for length in 1..starts.len() {
        starts[length] += starts[length - 1];
    }
    let mut by_length = vec![0u32; lengths.len()];
    let mut next = starts.clone();
    for (index, &length) in (0u32..).zip(lengths) {
        by_length[next[length as usize]] = index;
        next[length as usize] += 1;
    }
    (by_length, starts)
}

/// [`assign`] with the randomness bload's plans carry each epoch, so that its time can be set
/// beside bload's for the same work: which sequence of a length fills each slot of that length
/// (each length's run shuffled before it is handed out), and the order of the packs (their
/// spans, as bload's plans keep them, shuffled). The shuffles are drawn from ChaCha8 as bload's
/// are, and draw ahead on large slices as bload's do, so neither side has the faster shuffle.
pub fn assign_shuffled(
    strategies: &[Strategy],
    lengths: &[u32],
    t_max: u32,
    seed: u64,
) -> (Assignment, Vec<(u64, u64)>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut by_length, starts) = sorted_by_length(lengths, t_max);
    for run in starts.windows(2) {
        shuffle(&mut rng, &mut by_length[run[0]..run[1]]);
    }
    let mut next = starts;
    let packs: u64 = strategies.iter().map(|s| s.count).sum();
    let mut assignment = Assignment {
        sequences: Vec::with_capacity(lengths.len()),
        ends: Vec::with_capacity(packs as usize),
    };
    let mut spans = Vec::with_capacity(packs as usize);
    for strategy in strategies {
        for _ in 0..strategy.count {
            let start = assignment.sequences.len() as u64;
            for &length in &strategy.lengths {
                assignment.sequences.push(by_length[next[length as usize]]);
                next[length as usize] += 1;
            }
            let end = assignment.sequences.len() as u64;
            assignment.ends.push(end);
            spans.push((start, end));
        }
    }
    shuffle(&mut rng, &mut spans);
    (assignment, spans)
}

/// Fisher-Yates with Lemire's draws; on slices past a megabyte, each pick drawn 128 swaps early
/// and its item prefetched, so that the swaps' reads from memory overlap.
fn shuffle<T>(rng: &mut ChaCha8Rng, items: &mut [T]) {
    const AHEAD: usize = 128;
    let len = items.len();
    let mut below = |n: usize| -> usize {
        let n = n as u32;
        let mut product = u64::from(rng.next_u32()) * u64::from(n);
        // (The remainder, a division, only when the draw may need rejecting.)
        if (product as u32) < n {
            let threshold = n.wrapping_neg() % n;
            while (product as u32) < threshold {
                product = u64::from(rng.next_u32()) * u64::from(n);
            }
        }
        (product >> 32) as usize
    };
    if std::mem::size_of_val(items) < 1 << 20 {
        for last in (1..len).rev() {
            items.swap(last, below(last + 1));
        }
        return;
    }
    let mut picks = [0usize; AHEAD];
    for (k, pick) in picks.iter_mut().enumerate() {
        *pick = below(len - k);
    }
    for k in 0..len - 1 {
        let pick = picks[k % AHEAD];
        if k + AHEAD < len - 1 {
            let early = below(len - k - AHEAD);
            picks[k % AHEAD] = early;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint that reads nothing and cannot fault.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T2};
                _mm_prefetch::<_MM_HINT_T2>(items.as_ptr().add(early).cast::<i8>());
            }
        }
        items.swap(len - 1 - k, pick);
    }
}
