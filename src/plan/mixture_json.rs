//! A mixture's saved form: its sources as JSON beside the concatenated lengths, what a stored
//! planner (the pickled Python planner) needs to be made again.

use super::mixture::Source;
use super::Planner;
use crate::error::{Error, Result};
use crate::options::Options;

impl Planner {
    /// The sources as JSON, `[{"name": .., "weight": .., "sequences": ..}, ..]` (none for one
    /// lengths set): with the concatenated lengths, what a stored planner needs to be made again
    /// (the pickled Python planner), by [`Planner::with_sources_json`].
    pub fn sources_json(&self) -> Option<String> {
        let mixture = self.mixture.as_ref()?;
        let sources: Vec<serde_json::Value> = (0..mixture.names.len())
            .map(|s| {
                serde_json::json!({
                    "name": mixture.names[s],
                    "weight": mixture.weights[s],
                    "sequences": mixture.starts[s + 1] - mixture.starts[s],
                })
            })
            .collect();
        Some(serde_json::Value::Array(sources).to_string())
    }

    /// The planner [`Planner::sources_json`] describes, of these concatenated lengths.
    pub fn with_sources_json(lengths: &[u32], text: &str, options: Options) -> Result<Self> {
        #[derive(serde::Deserialize)]
        struct Stored {
            name: String,
            weight: f64,
            sequences: usize,
        }
        let shown: String = text.chars().take(200).collect();
        let stored: Vec<Stored> = serde_json::from_str(text).map_err(|err| {
            Error::invalid("sources", &shown, format!("sources saved by bload ({err})"))
        })?;
        let mut rest = lengths;
        let mut sources = Vec::with_capacity(stored.len());
        for source in stored {
            if source.sequences > rest.len() {
                return Err(Error::invalid(
                    "sources",
                    shown,
                    "as many lengths as the sources",
                ));
            }
            let (own, after) = rest.split_at(source.sequences);
            rest = after;
            sources.push(Source::new(source.name, own.to_vec(), source.weight));
        }
        if !rest.is_empty() {
            return Err(Error::invalid(
                "sources",
                shown,
                "as many lengths as the sources",
            ));
        }
        Planner::with_sources(sources, options)
    }
}
