//! A mixture of lengths files (docs/mixtures.md), `--source PATH:WEIGHT` repeated (parsed in
//! `args.rs`), in place of `--lengths`. Each source is named by its path as typed; the core
//! chooses each epoch's sequences and reports what each source gave, which `stats` and `plan`
//! print.

use crate::cli::args::Args;
use crate::Failure;
use bload::{read_lengths_as, Options, Planner, Source, SourceStats};
use std::io::Write;

/// The planner of the command's lengths: `--lengths`, or the mixture of its `--source`s.
pub fn planner_of(args: &Args, options: Options) -> Result<Planner, Failure> {
    if args.sources.is_empty() {
        let lengths = read_lengths_as(&args.lengths, args.lengths_format)?;
        return Ok(Planner::new(lengths, options)?);
    }
    let mut sources = Vec::with_capacity(args.sources.len());
    for source in &args.sources {
        let lengths = read_lengths_as(&source.path, args.lengths_format)?;
        let name = source.path.display().to_string();
        sources.push(Source::new(name, lengths, source.weight));
    }
    Planner::with_sources(sources, options).map_err(|mut err| {
        err.argument = err.argument.replace("sources[", "--source[");
        Failure::Input(err)
    })
}

/// One line per source: what it gave the epoch against what its weight asked.
pub fn write_sources(out: &mut impl Write, sources: &[SourceStats]) -> std::io::Result<()> {
    for source in sources {
        writeln!(
            out,
            "source {}: {} steps ({:.2}% of the epoch, weight {:.2}%), {} sequences served (of \
             its {}: {} repeats, {} left out)",
            source.name,
            source.steps,
            source.share * 100.0,
            source.weight_share * 100.0,
            source.sequences,
            source.source_sequences,
            source.repeats,
            source.left_out,
        )?;
    }
    Ok(())
}
