//! `bload`: the command-line face of the planner.
//!
//! `bload stats` compares packing policies and the paper's baselines on a lengths file;
//! `bload plan` prints one rank's batches with their block tables.

use bload::stats::{mix, truncate};
use bload::{read_lengths, Error, MethodStats, Options, Oversize, Planner, Policy};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "\
usage:
  bload stats --lengths FILE --t-max N [--world-size W] [--blocks-per-batch B] [--seed S]
              [--epoch E] [--split] [--truncate-to N] [--mix-to N] [--json]
  bload plan  --lengths FILE --t-max N --rank R [--world-size W] [--blocks-per-batch B]
              [--seed S] [--epoch E] [--split] [--policy best_fit|random_fill|pad_to_max] [--json]

FILE holds one sequence length per line (blank lines and # comments are skipped). --split cuts sequences longer than t_max into
chunks instead of refusing them. --truncate-to and --mix-to default to the mean length.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("bload: {message}\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Failure::Input(err)) => {
            eprintln!("bload: error: {err}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    Usage(String),
    Input(Error),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        Failure::Input(err)
    }
}

/// Parsed command line, shared by both commands.
struct Args {
    lengths: Option<PathBuf>,
    options: Options,
    t_max_given: bool,
    epoch: u64,
    rank: Option<u32>,
    truncate_to: Option<u32>,
    mix_to: Option<u32>,
    json: bool,
}

fn parse_args(command: &str, words: &[String]) -> Result<Args, Failure> {
    let mut args = Args {
        lengths: None,
        options: Options::new(1),
        t_max_given: false,
        epoch: 0,
        rank: None,
        truncate_to: None,
        mix_to: None,
        json: false,
    };
    let mut words = words.iter();
    while let Some(flag) = words.next() {
        let mut value = || {
            words
                .next()
                .map(String::as_str)
                .ok_or_else(|| Failure::Usage(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--lengths" => args.lengths = Some(PathBuf::from(value()?)),
            "--t-max" => {
                args.options.t_max = number(flag, value()?)?;
                args.t_max_given = true;
            }
            "--world-size" => args.options.world_size = number(flag, value()?)?,
            // --batch-blocks: the name before every interface said blocks_per_batch.
            "--blocks-per-batch" | "--batch-blocks" => {
                args.options.blocks_per_batch = number(flag, value()?)?
            }
            "--seed" => args.options.seed = number(flag, value()?)?,
            "--epoch" => args.epoch = number(flag, value()?)?,
            "--split" => args.options.oversize = Oversize::Split,
            "--json" => args.json = true,
            "--rank" if command == "plan" => args.rank = Some(number(flag, value()?)?),
            "--policy" if command == "plan" => args.options.policy = value()?.parse()?,
            "--truncate-to" if command == "stats" => {
                args.truncate_to = Some(number(flag, value()?)?)
            }
            "--mix-to" if command == "stats" => args.mix_to = Some(number(flag, value()?)?),
            _ => {
                return Err(Failure::Usage(format!(
                    "unknown option {flag:?} for {command}"
                )))
            }
        }
    }
    if args.lengths.is_none() {
        return Err(Failure::Usage("--lengths FILE is required".into()));
    }
    if !args.t_max_given {
        return Err(Failure::Usage("--t-max N is required".into()));
    }
    Ok(args)
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, Failure> {
    text.parse().map_err(|_| {
        Failure::Input(Error {
            argument: flag.to_string(),
            value: format!("{text:?}"),
            expected: "a non-negative integer".into(),
        })
    })
}

fn run(words: &[String]) -> Result<(), Failure> {
    match words.first().map(String::as_str) {
        Some("stats") => stats(parse_args("stats", &words[1..])?),
        Some("plan") => plan(parse_args("plan", &words[1..])?),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(Failure::Usage(format!("unknown command {other:?}"))),
        None => Err(Failure::Usage("a command is required".into())),
    }
}

fn load(args: &Args) -> Result<Vec<u32>, Failure> {
    Ok(read_lengths(
        args.lengths.as_deref().expect("checked by parse_args"),
    )?)
}

/// Runs `method` and records its wall time in its `plan_ms`.
fn timed(method: impl FnOnce() -> Result<MethodStats, Error>) -> Result<MethodStats, Error> {
    let start = Instant::now();
    let mut row = method()?;
    row.plan_ms = start.elapsed().as_secs_f64() * 1e3;
    Ok(row)
}

fn stats(args: Args) -> Result<(), Failure> {
    let lengths = load(&args)?;
    let steps: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    let mean = (steps / lengths.len() as u64) as u32;
    let truncate_to = args.truncate_to.unwrap_or(mean);
    let mix_to = args.mix_to.unwrap_or(mean);

    // (label in the table, name in JSON, cost)
    let mut rows: Vec<(String, &str, MethodStats)> = Vec::new();
    let mut bound = None;
    for policy in Policy::ALL {
        let options = Options {
            policy,
            ..args.options.clone()
        };
        let row = timed(|| {
            let planner = Planner::new(lengths.clone(), options)?;
            let plan = planner.plan(args.epoch);
            bound = Some(planner.lower_bound());
            let s = plan.stats();
            Ok(MethodStats {
                blocks: s.blocks,
                padding: s.padding,
                deleted: s.deleted,
                efficiency: s.efficiency,
                plan_ms: 0.0,
            })
        })?;
        rows.push((policy.name().into(), policy.name(), row));
    }
    let bound = bound.expect("planned at least once");
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
        let out = json!({"lower_bound_padding": bound.padding, "policies": policies});
        println!("{out}");
        return Ok(());
    }
    println!(
        "{}: {} sequences, {} steps, longest {}",
        args.lengths.as_ref().expect("checked").display(),
        lengths.len(),
        steps,
        lengths.iter().max().expect("not empty"),
    );
    println!(
        "t_max {}, {} rank(s) x {} block(s) per batch, seed {}, epoch {}",
        o.t_max, o.world_size, o.blocks_per_batch, o.seed, args.epoch
    );
    println!(
        "{:<14} {:>9} {:>10} {:>9} {:>11} {:>9}",
        "method", "blocks", "padding", "deleted", "efficiency", "plan_ms"
    );
    for (label, _, row) in &rows {
        println!(
            "{:<14} {:>9} {:>10} {:>9} {:>10.2}% {:>9.2}",
            label,
            row.blocks,
            row.padding,
            row.deleted,
            row.efficiency * 100.0,
            row.plan_ms
        );
    }
    println!(
        "{:<14} {:>9} {:>10}",
        "lower bound", bound.blocks, bound.padding
    );
    Ok(())
}

fn plan(args: Args) -> Result<(), Failure> {
    let rank = args
        .rank
        .ok_or_else(|| Failure::Usage("--rank R is required".into()))?;
    let lengths = load(&args)?;
    let planner = Planner::new(lengths, args.options.clone())?;
    let plan = planner.plan(args.epoch);
    let batches = plan.rank_batches(rank)?;
    let o = plan.options();
    if args.json {
        let batches: Vec<_> = batches
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
        println!("{out}");
        return Ok(());
    }
    let s = plan.stats();
    println!(
        "plan {:#018x}: epoch {}, {}, {} blocks, {} padding steps ({:.2}% efficient)",
        plan.hash(),
        plan.epoch(),
        o.policy,
        s.blocks,
        s.padding,
        s.efficiency * 100.0
    );
    println!(
        "rank {rank} of {}: {} batches of {} block(s) x {} steps",
        o.world_size,
        plan.batches_per_rank(),
        o.blocks_per_batch,
        o.t_max
    );
    println!("each piece: #sequence[steps of the sequence]@start in block");
    for (number, batch) in batches.enumerate() {
        println!("batch {number}");
        for block in batch.blocks() {
            let pieces: Vec<String> = block
                .pieces()
                .map(|p| {
                    let more = if p.continues { "+" } else { "" };
                    format!(
                        "#{}[{}..{}]{more}@{}",
                        p.index,
                        p.offset,
                        p.offset + p.length,
                        p.block_offset
                    )
                })
                .collect();
            println!("  {} | padding {}", pieces.join(" "), block.padding());
        }
    }
    Ok(())
}
