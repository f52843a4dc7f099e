//! Mixtures of sources: several lengths sets, each giving a set share of an epoch's steps.
//!
//! A mixture only decides which sequences an epoch holds; the ordinary planner packs them. Its
//! sequences are numbered as if the sources were concatenated, source 0 first: sequence `i` of
//! source `s` is `starts[s] + i` (so a dataset that concatenates the sources in the same order
//! serves them as they are, and [`Planner::source_of`] maps a piece back). An epoch has as many
//! steps as all sources together; source `s` gives `weight[s] / sum(weights)` of them. A source
//! below its share is served whole, again in a new order, until its share is reached; one above
//! it is drawn from, without replacement, until it is. Either way its last sequence passes its
//! share by less than that sequence's length. Every repeated and every left-out sequence is
//! counted per source ([`SourceStats`]). The choice is a pure function of (sources, seed, epoch),
//! the same for every world size, so a resumed epoch has the same sequences.

use super::Planner;
use crate::alloc::{try_reserve, try_with_capacity};
use crate::error::{Error, Result};
use crate::options::Options;
use crate::rng::{PlanRng, Stream};
use serde::Serialize;
use std::sync::Arc;
use std::sync::OnceLock;

/// One source of a mixture: its sequences' lengths and its weight, the share of each epoch's
/// steps it gives relative to the other sources' weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// How stats, states and errors name it; unique in its mixture.
    pub name: String,
    pub lengths: Vec<u32>,
    pub weight: f64,
}

impl Source {
    pub fn new(name: impl Into<String>, lengths: Vec<u32>, weight: f64) -> Self {
        Source {
            name: name.into(),
            lengths,
            weight,
        }
    }
}

/// What a mixture is, besides the concatenated lengths the planner holds.
#[derive(Debug, Clone)]
pub(super) struct Mixture {
    pub(super) names: Vec<String>,
    pub(super) weights: Vec<f64>,
    /// `starts[s]`: the first sequence of source `s` in the concatenation; one more at the end.
    pub(super) starts: Vec<u32>,
    /// Steps of each source.
    steps: Vec<u64>,
}

/// One source's part of an epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceStats {
    pub name: String,
    /// Its weight over the sum of the weights: the share of steps asked of it.
    pub weight_share: f64,
    /// Sequences in the source.
    pub source_sequences: u64,
    /// Sequences the epoch holds from it, a repeated one each time it comes.
    pub sequences: u64,
    /// Steps the epoch holds from it.
    pub steps: u64,
    /// Its steps over the epoch's: within one of its sequences of `weight_share`.
    pub share: f64,
    /// Sequences served more than once, counted once per extra time (a source below its share).
    pub repeats: u64,
    /// Sequences not served this epoch (a source above its share).
    pub left_out: u64,
}

/// An epoch's choice: each chosen entry's sequence (concatenation numbering), and per source
/// what it gave.
pub(super) struct Choice {
    pub(super) sequences: Vec<u32>,
    pub(super) stats: Vec<SourceStats>,
}

impl Planner {
    /// A planner of a mixture of `sources` (see the module's comment); a source without a name
    /// is named by its index. Its `lengths()`, `steps()`, `pieces()` and `lower_bound()` are
    /// those of the sources' sequences, each once; an epoch's are in its plan's stats. Errors name the source's argument, its value and what was
    /// expected: no source, a weight that is not a finite number above 0, a source without
    /// sequences, a name used twice, and the lengths' own errors (as `sources[s].lengths[i]`).
    pub fn with_sources(mut sources: Vec<Source>, options: Options) -> Result<Self> {
        for (s, source) in sources.iter_mut().enumerate() {
            if source.name.is_empty() {
                source.name = s.to_string();
            }
        }
        if sources.is_empty() {
            return Err(Error::invalid(
                "sources",
                "an empty list",
                "at least one source (lengths with a weight)",
            ));
        }
        let mut total = 0u64;
        for (s, source) in sources.iter().enumerate() {
            if !(source.weight.is_finite() && source.weight > 0.0) {
                return Err(Error::invalid(
                    format!("sources[{s}].weight"),
                    source.weight,
                    "a finite number above 0, the source's share of the epoch's steps",
                ));
            }
            if source.lengths.is_empty() {
                return Err(Error::invalid(
                    format!("sources[{s}].lengths"),
                    "an empty list",
                    "at least one sequence: a source with no steps cannot give a share of them",
                ));
            }
            if sources[..s].iter().any(|other| other.name == source.name) {
                return Err(Error::invalid(
                    format!("sources[{s}].name"),
                    format!("{:?}", source.name),
                    "a name no other source has",
                ));
            }
            total += source.lengths.len() as u64;
        }
        let weights: f64 = sources.iter().map(|source| source.weight).sum();
        if !weights.is_finite() {
            // Each share is a weight over their sum: past f64's range, every share would be 0.
            return Err(Error::invalid(
                "sources' weights",
                format!("a sum of {weights}"),
                format!(
                    "weights whose sum is at most {:e} (only their ratios matter)",
                    f64::MAX
                ),
            ));
        }
        if total > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "sources",
                format!("{total} sequences"),
                format!("at most {} sequences in all", u32::MAX),
            ));
        }
        let capacity = total as usize;
        let mut lengths = try_with_capacity("the sources' lengths", capacity)?;
        let mut mixture = Mixture {
            names: Vec::with_capacity(sources.len()),
            weights: Vec::with_capacity(sources.len()),
            starts: vec![0],
            steps: Vec::with_capacity(sources.len()),
        };
        for source in sources {
            lengths.extend_from_slice(&source.lengths);
            mixture.starts.push(lengths.len() as u32);
            mixture
                .steps
                .push(source.lengths.iter().map(|&l| u64::from(l)).sum());
            mixture.names.push(source.name);
            mixture.weights.push(source.weight);
        }
        let starts = mixture.starts.clone();
        let mut planner = Planner::new(lengths, options).map_err(|err| named(err, &starts))?;
        planner.mixture = Some(Arc::new(mixture));
        Ok(planner)
    }

    /// Whether the planner plans a mixture of sources.
    pub fn is_mixture(&self) -> bool {
        self.mixture.is_some()
    }

    /// The sources' names, in order (none for a planner of one lengths set).
    pub fn source_names(&self) -> &[String] {
        self.mixture.as_ref().map_or(&[], |m| &m.names)
    }

    /// Where each source starts in the concatenation, and one more at the end (`[0, n]` for a
    /// planner of one lengths set).
    pub fn source_starts(&self) -> Vec<u32> {
        match &self.mixture {
            Some(mixture) => mixture.starts.clone(),
            None => vec![0, self.lengths.len() as u32],
        }
    }

    /// The source of sequence `index` (as a piece names it) and its index in that source.
    pub fn source_of(&self, index: u32) -> Result<(usize, u32)> {
        let starts = self.source_starts();
        let sequences = starts[starts.len() - 1];
        if index >= sequences {
            return Err(Error::invalid(
                "index",
                index,
                format!("a sequence below {sequences}, the sequences planned"),
            ));
        }
        let source = starts.partition_point(|&start| start <= index) - 1;
        Ok((source, index - starts[source]))
    }

    /// The mixture as states and messages show it: each source's name, weight and sequences
    /// ("none" for a planner of one lengths set). Two mixtures plan alike only if it is equal.
    pub fn mixture_text(&self) -> String {
        let Some(mixture) = &self.mixture else {
            return "none".into();
        };
        let sources: Vec<String> = (0..mixture.names.len())
            .map(|s| {
                format!(
                    "{:?} weight {} ({} sequences)",
                    mixture.names[s],
                    mixture.weights[s],
                    mixture.starts[s + 1] - mixture.starts[s]
                )
            })
            .collect();
        sources.join(", ")
    }

    /// A stable fingerprint of [`Planner::mixture_text`] (0 for one lengths set), for the ranks'
    /// agreement check.
    pub fn mixture_hash(&self) -> u64 {
        if self.mixture.is_none() {
            return 0;
        }
        let text = self.mixture_text();
        let words: Vec<u64> = text
            .as_bytes()
            .chunks(8)
            .map(|chunk| {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                u64::from_le_bytes(word)
            })
            .collect();
        super::stable_hash(&words)
    }

    /// What each source gives `epoch` (none for a planner of one lengths set).
    pub fn source_stats(&self, epoch: u64) -> Result<Vec<SourceStats>> {
        match &self.mixture {
            Some(mixture) => Ok(self.choose(mixture, epoch)?.stats),
            None => Ok(Vec::new()),
        }
    }

    /// The lengths of `epoch`'s sequences, in the order they are chosen (all the lengths, for one
    /// lengths set): planned as one lengths set with these options, they give the same blocks.
    pub fn epoch_lengths(&self, epoch: u64) -> Result<Vec<u32>> {
        let Some(mixture) = &self.mixture else {
            return Ok(self.lengths.to_vec());
        };
        let choice = self.choose(mixture, epoch)?;
        let mut lengths = try_with_capacity("the epoch's chosen lengths", choice.sequences.len())?;
        lengths.extend(choice.sequences.iter().map(|&i| self.lengths[i as usize]));
        Ok(lengths)
    }

    /// The plan of `epoch` of a mixture: its chosen sequences planned as one lengths set, each
    /// piece then named by its sequence in the concatenation.
    pub(super) fn plan_mixture(&self, mixture: &Mixture, epoch: u64) -> Result<super::EpochPlan> {
        let choice = self.choose(mixture, epoch)?;
        let mut chosen = try_with_capacity("the epoch's chosen lengths", choice.sequences.len())?;
        chosen.extend(choice.sequences.iter().map(|&i| self.lengths[i as usize]));
        let mut planner = Planner::new(chosen, self.options.clone()).map_err(|mut err| {
            // Only the epoch's own counts can fail here (the lengths were checked): say so.
            err.expected = format!(
                "{} (in epoch {epoch}'s choice of the mixture's sequences)",
                err.expected
            );
            err
        })?;
        // It plans this one epoch: its packing is not worth keeping (`Planner::kept_packing`).
        planner.kept_packing = OnceLock::from(None);
        let mut plan = planner.plan(epoch)?;
        for sequence in plan.piece_sequences.vec("the plan's pieces' sequences")? {
            *sequence = choice.sequences[*sequence as usize];
        }
        plan.lengths = self.lengths.clone();
        Ok(plan)
    }

    /// The sequences of `epoch`: each source's drawn in turn from its own random stream.
    pub(super) fn choose(&self, mixture: &Mixture, epoch: u64) -> Result<Choice> {
        let total_steps: u64 = mixture.steps.iter().sum();
        let total_weight: f64 = mixture.weights.iter().sum();
        let mut sequences = Vec::new();
        let mut stats = Vec::with_capacity(mixture.names.len());
        for s in 0..mixture.names.len() {
            let weight_share = mixture.weights[s] / total_weight;
            let target = (total_steps as f64 * weight_share).round() as u64;
            let (first, end) = (mixture.starts[s], mixture.starts[s + 1]);
            let count = end - first;
            let mut order: Vec<u32> = try_with_capacity("a source's order", count as usize)?;
            // Its passes' sequences: whole passes and one more at most.
            let passes = target.div_ceil(mixture.steps[s]) as usize;
            try_reserve(
                &mut sequences,
                "the epoch's sequences",
                passes.saturating_mul(count as usize),
            )?;
            let mut rng = PlanRng::for_part(self.options.seed, epoch, Stream::Mixture, s as u64);
            let (mut steps, mut taken) = (0u64, 0u64);
            'passes: while steps < target {
                order.clear();
                order.extend(first..end);
                rng.shuffle(&mut order);
                for &index in &order {
                    if steps >= target {
                        break 'passes;
                    }
                    sequences.push(index);
                    steps += u64::from(self.lengths[index as usize]);
                    taken += 1;
                }
            }
            stats.push(SourceStats {
                name: mixture.names[s].clone(),
                weight_share,
                source_sequences: u64::from(count),
                sequences: taken,
                steps,
                share: 0.0,
                repeats: taken.saturating_sub(u64::from(count)),
                left_out: u64::from(count).saturating_sub(taken),
            });
        }
        let epoch_steps: u64 = stats.iter().map(|source| source.steps).sum();
        for source in &mut stats {
            source.share = source.steps as f64 / epoch_steps.max(1) as f64;
        }
        Ok(Choice { sequences, stats })
    }
}

/// An error of the concatenated lengths, named by source: `lengths[i]` as `sources[s].lengths[j]`.
fn named(mut err: Error, starts: &[u32]) -> Error {
    let index = err
        .argument
        .strip_prefix("lengths[")
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|index| index.parse::<u32>().ok());
    if let Some(index) = index {
        let source = starts.partition_point(|&start| start <= index) - 1;
        err.argument = format!("sources[{source}].lengths[{}]", index - starts[source]);
    } else if err.argument == "lengths" {
        err.argument = "sources".into();
    }
    err
}

#[cfg(test)]
#[path = "mixture_tests.rs"]
mod tests;
