//! The bridge's half of mixtures of sources (the core's `plan/mixture.rs`): a planner of several
//! sources, and what each gives an epoch. C++ hands the sources over as their concatenated
//! lengths, each source's count of sequences, its weight and its name.

use super::ffi::SourceStat;
use super::guard::{guarded, BridgeError};
use super::Planner;
use bload::{Error, Source};

/// A planner of the mixture whose source `s` is the next `sizes[s]` of `lengths`, with
/// `weights[s]` and `names[s]`.
pub(crate) fn new_mixture_planner(
    lengths: &[i64],
    sizes: &[i64],
    weights: &[f64],
    names: Vec<String>,
    options: &super::PlanOptions,
) -> Result<Box<Planner>, BridgeError> {
    guarded("new_mixture_planner", || {
        let options = bload::Options::try_from(options)?;
        if weights.len() != sizes.len() || names.len() != sizes.len() {
            return Err(Error::invalid(
                "sources",
                format!(
                    "{} sizes, {} weights and {} names",
                    sizes.len(),
                    weights.len(),
                    names.len()
                ),
                "a size, a weight and a name for each source",
            ));
        }
        let mut sources = Vec::with_capacity(sizes.len());
        let mut rest = lengths;
        for (s, ((&size, &weight), name)) in sizes.iter().zip(weights).zip(names).enumerate() {
            let size = usize::try_from(size)
                .ok()
                .filter(|&size| size <= rest.len())
                .ok_or_else(|| {
                    let expected = format!("from 0 to {}, the lengths left for it", rest.len());
                    Error::invalid(format!("sources[{s}].size"), size, expected)
                })?;
            let (own, after) = rest.split_at(size);
            rest = after;
            let narrow = bload::narrow_lengths(own).map_err(|mut err| {
                err.argument = format!("sources[{s}].{}", err.argument);
                err
            })?;
            sources.push(Source::new(name, narrow, weight));
        }
        if !rest.is_empty() {
            return Err(Error::invalid(
                "lengths",
                format!("{} lengths after the last source", rest.len()),
                "exactly the sources' lengths, one after another",
            ));
        }
        Ok(Box::new(Planner(bload::Planner::with_sources(
            sources, options,
        )?)))
    })
}

/// The planner a stored [`Planner::sources_json`] describes, of these concatenated lengths.
pub(crate) fn new_planner_from_sources_json(
    lengths: &[i64],
    sources: &str,
    options: &super::PlanOptions,
) -> Result<Box<Planner>, BridgeError> {
    guarded("new_planner_from_sources_json", || {
        let options = bload::Options::try_from(options)?;
        let narrow = bload::narrow_lengths(lengths)?;
        Ok(Box::new(Planner(bload::Planner::with_sources_json(
            &narrow, sources, options,
        )?)))
    })
}

impl Planner {
    /// The sources as the core stores them in JSON ("" for one lengths set).
    pub(crate) fn sources_json(&self) -> String {
        self.0.sources_json().unwrap_or_default()
    }

    pub(crate) fn mixture_text(&self) -> String {
        self.0.mixture_text()
    }

    pub(crate) fn mixture_hash(&self) -> u64 {
        self.0.mixture_hash()
    }

    pub(crate) fn source_names(&self) -> Vec<String> {
        self.0.source_names().to_vec()
    }

    pub(crate) fn source_starts(&self) -> Vec<i64> {
        self.0.source_starts().into_iter().map(i64::from).collect()
    }

    pub(crate) fn source_stats(&self, epoch: i64) -> Result<Vec<SourceStat>, BridgeError> {
        guarded("source_stats", || {
            let epoch = u64::try_from(epoch)
                .map_err(|_| Error::invalid("epoch", epoch, "an epoch of at least 0"))?;
            let stats = self.0.source_stats(epoch)?;
            Ok(stats
                .into_iter()
                .map(|source| SourceStat {
                    name: source.name,
                    weight_share: source.weight_share,
                    source_sequences: source.source_sequences,
                    sequences: source.sequences,
                    steps: source.steps,
                    share: source.share,
                    repeats: source.repeats,
                    left_out: source.left_out,
                })
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> super::super::PlanOptions {
        super::super::default_plan_options(10)
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn sources_arrive_as_sizes_of_the_concatenated_lengths() {
        let lengths = [3, 4, 5, 6, 7, 2];
        let planner = new_mixture_planner(
            &lengths,
            &[4, 2],
            &[3.0, 1.0],
            names(&["a", ""]),
            &options(),
        )
        .unwrap();
        assert_eq!(planner.source_names(), ["a", "1"]);
        assert_eq!(planner.source_starts(), [0, 4, 6]);
        let stats = planner.source_stats(0).unwrap();
        assert_eq!(stats.len(), 2);
        assert!((stats[0].weight_share - 0.75).abs() < 1e-12);
        // Stored and made again: the same mixture, the same plans.
        let stored = planner.sources_json();
        let again = new_planner_from_sources_json(&lengths, &stored, &options()).unwrap();
        assert_eq!(again.mixture_text(), planner.mixture_text());
        assert_eq!(
            again.plan_epoch(3).unwrap().plan_hash(),
            planner.plan_epoch(3).unwrap().plan_hash()
        );
        let err = new_planner_from_sources_json(&lengths[..5], &stored, &options());
        assert!(err.err().unwrap().to_string().starts_with("sources = "));
        assert_eq!(
            planner.source_stats(-1).err().unwrap().to_string(),
            "epoch = -1: expected an epoch of at least 0"
        );
    }

    #[test]
    fn bad_sources_are_named() {
        let error = |lengths: &[i64], sizes: &[i64], weights: &[f64], n: &[&str]| {
            let made = new_mixture_planner(lengths, sizes, weights, names(n), &options());
            made.err().unwrap().to_string()
        };
        assert!(error(&[3, 4], &[1, 1], &[1.0], &["a", "b"])
            .starts_with("sources = 2 sizes, 1 weights"));
        assert!(
            error(&[3, 4], &[1, 2], &[1.0, 1.0], &["a", "b"]).starts_with("sources[1].size = 2")
        );
        assert!(
            error(&[3, 4], &[1, -1], &[1.0, 1.0], &["a", "b"]).starts_with("sources[1].size = -1")
        );
        assert!(error(&[3, -4], &[1, 1], &[1.0, 1.0], &["a", "b"])
            .starts_with("sources[1].lengths[0] = -4"));
        assert!(error(&[3, 4, 5], &[1, 1], &[1.0, 1.0], &["a", "b"])
            .starts_with("lengths = 1 lengths after"));
        assert!(error(&[3, 4], &[1, 1], &[1.0, -2.0], &["a", "b"])
            .starts_with("sources[1].weight = -2"));
    }
}
