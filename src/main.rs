//! `bload`: the command-line face of the planner.
//!
//! `bload stats` compares packing policies and the paper's baselines on a lengths file;
//! `bload plan` prints one rank's batches with their block tables; `bload sweep` compares the
//! padding of a range of block sizes, to choose `t_max`; `bload lengths` writes a lengths file's
//! binary cache (`.npy`). `--help` (or `-h`) after a command
//! prints its help, and `bload --version` the version; both are output like any other, exit 0.
//!
//! Everything goes to stdout through one buffered writer whose errors end the command: a closed
//! pipe (`bload plan ... | head`) quietly, as Unix tools end, and any other failed write (a full
//! disk) with an error, never a panic.

/// The command line's parts (in `src/cli/`; the library's modules are its neighbours in `src/`).
mod cli {
    pub mod args;
    pub mod lengths;
    pub mod mixture;
    pub mod plan_json;
    pub mod progress;
    pub mod stats;
    pub mod svg;
    pub mod sweep;
    pub mod sweep_work;
    pub mod usage;
}

use bload::{EpochPlan, Error, MethodStats};
use cli::args::{parse_args, Args, Parsed};
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut out = BufWriter::new(io::stdout().lock());
    let words = words();
    // A usage error is followed by the help of the command it was given to (bload's usage when
    // there is none).
    let command = match &words {
        Ok(words) => words.first().cloned().unwrap_or_default(),
        Err(_) => String::new(),
    };
    let result = words.and_then(|words| run(&words, &mut out));
    // Flushing is part of writing: its error is the output's error.
    match result.and_then(|()| Ok(out.flush()?)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader is gone (`| head`): nothing more is wanted, and nothing went wrong.
        Err(Failure::Output(err)) if err.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(err)) => report(&format!("error: writing the output: {err}"), 1),
        Err(Failure::Usage(message)) => {
            report(&format!("{message}\n{}", cli::usage::of(&command)), 2)
        }
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
        Some(command @ ("stats" | "plan" | "sweep")) => {
            let args = match parse_args(command, &words[1..])? {
                Parsed::Run(args) => args,
                Parsed::Help => return Ok(writeln!(out, "{}", cli::usage::of(command))?),
            };
            match command {
                "stats" => cli::stats::run(args, out),
                "plan" => plan(args, out),
                _ => cli::sweep::run(args, out),
            }
        }
        Some("lengths") => cli::lengths::run(&words[1..], out),
        Some("-h" | "--help") => Ok(writeln!(out, "{}", cli::usage::of(""))?),
        // `bload help COMMAND`, as git and cargo take it: the command's help.
        Some("help") => match words.get(1).map_or("", String::as_str) {
            command @ ("" | "stats" | "plan" | "sweep" | "lengths") => {
                Ok(writeln!(out, "{}", cli::usage::of(command))?)
            }
            other => Err(Failure::Usage(format!("unknown command {other:?}"))),
        },
        Some("-V" | "--version") => Ok(writeln!(out, "{}", cli::usage::version())?),
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
        rank_cost_imbalance: Some(s.rank_cost_imbalance),
    }
}

fn plan(args: Args, out: &mut impl Write) -> Result<(), Failure> {
    let rank = args
        .rank
        .ok_or_else(|| Failure::Usage("--rank R is required".into()))?;
    let planner = cli::mixture::planner_of(&args, args.options.clone())?;
    let plan = planner.plan(args.epoch)?;
    let sources = planner.source_stats(args.epoch)?;
    let batches = plan.rank_batches(rank)?;
    if args.json {
        return Ok(cli::plan_json::write(out, &plan, &sources, rank, batches)?);
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
    cli::mixture::write_sources(out, &sources)?;
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
