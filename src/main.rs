//! `bload`: the command-line face of the planner.
//!
//! `bload stats` compares packing policies and the paper's baselines on a lengths file;
//! `bload plan` prints one rank's batches with their block tables; `bload sweep` compares the
//! padding of a range of block sizes, to choose `t_max`.
//!
//! Everything goes to stdout through one buffered writer whose errors end the command: a closed
//! pipe (`bload plan ... | head`) quietly, as Unix tools end, and any other failed write (a full
//! disk) with an error, never a panic.

/// The command line's parts (in `src/cli/`; the library's modules are its neighbours in `src/`).
mod cli {
    pub mod args;
    pub mod plan_json;
    pub mod svg;
    pub mod sweep;
}

use bload::stats::{mix, truncate};
use bload::{read_lengths, EpochPlan, Error, LowerBound, MethodStats, Options, Planner, Policy};
use cli::args::{parse_args, Args, USAGE};
use serde_json::json;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut out = BufWriter::new(io::stdout().lock());
    let result = words().and_then(|words| run(&words, &mut out));
    // Flushing is part of writing: its error is the output's error.
    match result.and_then(|()| Ok(out.flush()?)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader is gone (`| head`): nothing more is wanted, and nothing went wrong.
        Err(Failure::Output(err)) if err.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(err)) => report(&format!("error: writing the output: {err}"), 1),
        Err(Failure::Usage(message)) => report(&format!("{message}\n{USAGE}"), 2),
        Err(Failure::Input(err)) => report(&format!("error: {err}"), 1),
    }
}

/// Says why bload stops, on stderr, and gives the exit status. A failure to write there is
/// ignored: stderr is where it would be reported.
fn report(message: &str, status: u8) -> ExitCode {
    let _ = writeln!(io::stderr(), "bload: {message}");
    ExitCode::from(status)
}

/// The command line after the program name.
fn words() -> Result<Vec<String>, Failure> {
    std::env::args_os()
        .skip(1)
        .map(|word| {
            word.into_string()
                .map_err(|word| Failure::Usage(format!("argument {word:?} is not valid UTF-8")))
        })
        .collect()
}

pub enum Failure {
    Usage(String),
    Input(Error),
    /// Writing to stdout failed.
    Output(io::Error),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        Failure::Input(err)
    }
}

impl From<io::Error> for Failure {
    fn from(err: io::Error) -> Self {
        Failure::Output(err)
    }
}

fn run(words: &[String], out: &mut impl Write) -> Result<(), Failure> {
    match words.first().map(String::as_str) {
        Some("stats") => stats(parse_args("stats", &words[1..])?, out),
        Some("plan") => plan(parse_args("plan", &words[1..])?, out),
        Some("sweep") => cli::sweep::run(parse_args("sweep", &words[1..])?, out),
        Some("-h" | "--help" | "help") => Ok(writeln!(out, "{USAGE}")?),
        Some(other) => Err(Failure::Usage(format!("unknown command {other:?}"))),
        None => Err(Failure::Usage("a command is required".into())),
    }
}

/// A copy of the lengths, for one more planner (which takes them by value); a lack of memory for
/// it is an error like any other.
fn copy_of(lengths: &[u32]) -> Result<Vec<u32>, Error> {
    let mut copy = Vec::new();
    copy.try_reserve_exact(lengths.len()).map_err(|_| {
        Error::out_of_memory("a copy of the lengths", lengths.len(), size_of::<u32>())
    })?;
    copy.extend_from_slice(lengths);
    Ok(copy)
}

/// What `plan` costs, in the units of the baselines: the numbers `stats` prints for each policy,
/// and `sweep` for each block size, so that the two commands agree.
fn cost(plan: &EpochPlan) -> MethodStats {
    let s = plan.stats();
    MethodStats {
        blocks: s.blocks,
        padding: s.padding,
        deleted: s.deleted,
        efficiency: s.efficiency,
        plan_ms: 0.0,
    }
}

/// Runs `method` and records its wall time in its `plan_ms`.
fn timed(method: impl FnOnce() -> Result<MethodStats, Error>) -> Result<MethodStats, Error> {
    let start = Instant::now();
    let mut row = method()?;
    row.plan_ms = start.elapsed().as_secs_f64() * 1e3;
    Ok(row)
}

fn stats(args: Args, out: &mut impl Write) -> Result<(), Failure> {
    let lengths = read_lengths(&args.lengths)?;
    let steps: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    let longest = lengths.iter().copied().max().unwrap_or_default();
    // A lengths file holds at least one length (read_lengths checks).
    let mean = (steps / lengths.len().max(1) as u64) as u32;
    let truncate_to = args.truncate_to.unwrap_or(mean);
    let mix_to = args.mix_to.unwrap_or(mean);

    // (label in the table, name in JSON, cost)
    let mut rows: Vec<(String, &str, MethodStats)> = Vec::new();
    // The packing policies share one bound; lanes, whose rows run for the whole epoch, another.
    let (mut bound, mut lanes_bound) = (LowerBound::default(), LowerBound::default());
    for policy in Policy::ALL {
        let options = Options {
            policy,
            ..args.options.clone()
        };
        let row = timed(|| {
            let planner = Planner::new(copy_of(&lengths)?, options)?;
            *(if policy.carries_state() {
                &mut lanes_bound
            } else {
                &mut bound
            }) = planner.lower_bound();
            Ok(cost(&planner.plan(args.epoch)?))
        })?;
        rows.push((policy.name().into(), policy.name(), row));
    }
    let o = &args.options;
    let cut = timed(|| truncate(&lengths, truncate_to, o))?;
    rows.push((format!("truncate({truncate_to})"), "truncate", cut));
    let mixed = timed(|| mix(&lengths, mix_to, o))?;
    rows.push((format!("mix({mix_to})"), "mix", mixed));

    if args.json {
        let policies: serde_json::Map<String, serde_json::Value> = rows
            .iter()
            .map(|(_, name, row)| (name.to_string(), json!(row)))
            .collect();
        let document = json!({
            "lower_bound_padding": bound.padding,
            "lanes_lower_bound_padding": lanes_bound.padding,
            "policies": policies,
        });
        writeln!(out, "{document}")?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: {} sequences, {} steps, longest {}",
        args.lengths.display(),
        lengths.len(),
        steps,
        longest,
    )?;
    writeln!(
        out,
        "t_max {}, {} rank(s) x {} block(s) per batch, seed {}, epoch {}",
        o.t_max, o.world_size, o.blocks_per_batch, o.seed, args.epoch
    )?;
    writeln!(
        out,
        "{:<14} {:>9} {:>10} {:>9} {:>11} {:>9}",
        "method", "blocks", "padding", "deleted", "efficiency", "plan_ms"
    )?;
    for (label, _, row) in &rows {
        writeln!(
            out,
            "{:<14} {:>9} {:>10} {:>9} {:>10.2}% {:>9.2}",
            label,
            row.blocks,
            row.padding,
            row.deleted,
            row.efficiency * 100.0,
            row.plan_ms
        )?;
    }
    for (label, bound) in [("lower bound", bound), ("lanes bound", lanes_bound)] {
        writeln!(out, "{label:<14} {:>9} {:>10}", bound.blocks, bound.padding)?;
    }
    Ok(())
}

fn plan(args: Args, out: &mut impl Write) -> Result<(), Failure> {
    let rank = args
        .rank
        .ok_or_else(|| Failure::Usage("--rank R is required".into()))?;
    let lengths = read_lengths(&args.lengths)?;
    let planner = Planner::new(lengths, args.options.clone())?;
    let plan = planner.plan(args.epoch)?;
    let batches = plan.rank_batches(rank)?;
    if args.json {
        return Ok(cli::plan_json::write(out, &plan, rank, batches)?);
    }
    let o = plan.options();
    let s = plan.stats();
    writeln!(
        out,
        "plan {:#018x}: epoch {}, {}, {} blocks, {} padding steps ({:.2}% efficient)",
        plan.hash(),
        plan.epoch(),
        o.policy,
        s.blocks,
        s.padding,
        s.efficiency * 100.0
    )?;
    writeln!(
        out,
        "rank {rank} of {}: {} batches of {} block(s) x {} steps",
        o.world_size,
        plan.batches_per_rank(),
        o.blocks_per_batch,
        o.t_max
    )?;
    writeln!(
        out,
        "each piece: #sequence[steps of the sequence]@start in block"
    )?;
    for (number, batch) in batches.enumerate() {
        writeln!(out, "batch {number}")?;
        for block in batch.blocks() {
            write!(out, "  ")?;
            for (number, p) in block.pieces().enumerate() {
                let space = if number > 0 { " " } else { "" };
                let more = if p.continues { "+" } else { "" };
                write!(
                    out,
                    "{space}#{}[{}..{}]{more}@{}",
                    p.index,
                    p.offset,
                    p.offset + p.length,
                    p.block_offset
                )?;
            }
            writeln!(out, " | padding {}", block.padding())?;
        }
    }
    Ok(())
}
