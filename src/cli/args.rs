//! The command line's words: flags, their values and the bounds each value must lie in.
//!
//! A value out of bounds is an error naming the flag, the value as typed and the real bounds, so
//! that `--t-max 99999999` is told the largest block size rather than "a non-negative integer".

use crate::Failure;
use bload::{Error, LengthsFormat, Options, Oversize, MAX_EPOCH, MAX_SEED, MAX_T_MAX};
use std::path::PathBuf;

/// Parsed command line, shared by the commands.
pub struct Args {
    pub lengths: PathBuf,
    /// `--source PATH:WEIGHT`, repeated (`stats` and `plan`): a mixture, in place of `--lengths`.
    pub sources: Vec<SourceArg>,
    /// `--lengths-format`: the format forced, else the one detected.
    pub lengths_format: Option<LengthsFormat>,
    pub options: Options,
    pub epoch: u64,
    /// `plan` only: checked against the world size, whichever flag came first.
    pub rank: Option<u32>,
    pub truncate_to: Option<u32>,
    pub mix_to: Option<u32>,
    pub json: bool,
    /// `sweep` only: the first and last block size, `A..B` (`options.t_max` is the last).
    pub t_max_range: Option<(u32, u32)>,
    /// `sweep` only: how many block sizes to plan.
    pub points: Option<u32>,
    /// `sweep` only: where to draw the chart.
    pub plot: Option<PathBuf>,
    /// `sweep` only: run a sweep whose estimated work is past the limit (`cli/sweep_work.rs`).
    pub force: bool,
}

/// What a command's words ask for: a run with these arguments, or the command's help.
pub enum Parsed {
    Run(Args),
    /// `-h` or `--help` was among the words: whatever else they hold, the user asks how to
    /// write them, so the help is the answer rather than an error about another word.
    Help,
}

/// Bounds of the flags whose bounds do not depend on other flags.
const T_MAX: (u64, u64) = (1, MAX_T_MAX as u64);
const COUNT: (u64, u64) = (1, u32::MAX as u64);
/// What every interface takes (C++ and Python hold them in an int64): a plan printed here can be
/// trained.
const SEED: (u64, u64) = (0, MAX_SEED);
const EPOCH: (u64, u64) = (0, MAX_EPOCH as u64);
/// Two points are a line; past a thousand, a chart has more points than it has pixels for them.
const POINTS: (u64, u64) = (2, 1000);

/// Refuses an option given a second time (`seen` holds those given before): the first value
/// would be dropped unsaid. `--source` is the one option given once per source.
pub fn given_once(seen: &mut Vec<String>, flag: &str) -> Result<(), Failure> {
    // --batch-blocks is --blocks-per-batch's older name: one option.
    let name = if flag == "--batch-blocks" {
        "--blocks-per-batch"
    } else {
        flag
    };
    if flag == "--source" || !flag.starts_with("--") {
        return Ok(());
    }
    if seen.iter().any(|earlier| earlier == name) {
        return Err(Failure::Usage(format!(
            "{flag} is given twice: each option once (the first value would be dropped)"
        )));
    }
    seen.push(name.to_string());
    Ok(())
}

pub fn parse_args(command: &str, words: &[String]) -> Result<Parsed, Failure> {
    if words.iter().any(|word| word == "-h" || word == "--help") {
        return Ok(Parsed::Help);
    }
    let mut lengths = None;
    let mut t_max = None;
    let mut t_max_range = None;
    let mut rank_text = None;
    let mut args = Args {
        lengths: PathBuf::new(),
        sources: Vec::new(),
        lengths_format: None,
        options: Options::new(1),
        epoch: 0,
        rank: None,
        truncate_to: None,
        mix_to: None,
        json: false,
        t_max_range: None,
        points: None,
        plot: None,
        force: false,
    };
    let mut seen = Vec::new();
    let mut words = words.iter();
    while let Some(flag) = words.next() {
        given_once(&mut seen, flag)?;
        let mut value = || {
            words
                .next()
                .map(String::as_str)
                .ok_or_else(|| Failure::Usage(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--lengths" => lengths = Some(PathBuf::from(value()?)),
            "--source" if command != "sweep" => args.sources.push(parse_source(flag, value()?)?),
            "--lengths-format" => args.lengths_format = Some(lengths_format(flag, value()?)?),
            "--t-max" if command == "sweep" => t_max_range = Some(range(flag, value()?)?),
            "--t-max" => t_max = Some(number(flag, value()?, T_MAX)?),
            "--world-size" => args.options.world_size = number(flag, value()?, COUNT)?,
            // --batch-blocks: the name before every interface said blocks_per_batch.
            "--blocks-per-batch" | "--batch-blocks" => {
                args.options.blocks_per_batch = number(flag, value()?, COUNT)?
            }
            // A sweep's block and padding counts are the same for every seed and epoch.
            "--seed" if command != "sweep" => args.options.seed = number(flag, value()?, SEED)?,
            "--epoch" if command != "sweep" => args.epoch = number(flag, value()?, EPOCH)?,
            "--split" => args.options.oversize = Oversize::Split,
            "--max-pieces" if command != "sweep" => {
                args.options.max_pieces = Some(number(flag, value()?, COUNT)?)
            }
            "--cost" if command != "sweep" => {
                // The core names the option `cost`; here the user typed the flag.
                args.options.cost = value()?.parse().map_err(|mut err: Error| {
                    err.argument = flag.clone();
                    err
                })?
            }
            "--json" => args.json = true,
            "--rank" if command == "plan" => rank_text = Some(value()?),
            "--policy" if command == "plan" => {
                // The core names the option `policy`; here the user typed the flag.
                args.options.policy = value()?.parse().map_err(|mut err: Error| {
                    err.argument = flag.clone();
                    err
                })?
            }
            "--truncate-to" if command == "stats" => {
                args.truncate_to = Some(number(flag, value()?, COUNT)?)
            }
            "--mix-to" if command == "stats" => args.mix_to = Some(number(flag, value()?, COUNT)?),
            "--points" if command == "sweep" => args.points = Some(number(flag, value()?, POINTS)?),
            "--plot" if command == "sweep" => args.plot = Some(PathBuf::from(value()?)),
            "--force" if command == "sweep" => args.force = true,
            _ => {
                return Err(Failure::Usage(format!(
                    "unknown option {flag:?} for {command}"
                )))
            }
        }
    }
    match (lengths, args.sources.is_empty()) {
        (Some(_), false) => {
            return Err(Failure::Usage(
                "--lengths FILE and --source PATH:WEIGHT: give one lengths file or sources".into(),
            ))
        }
        (Some(lengths), true) => args.lengths = lengths,
        (None, false) => {}
        (None, true) => return Err(Failure::Usage("--lengths FILE is required".into())),
    }
    if command == "sweep" {
        let (first, last) =
            t_max_range.ok_or_else(|| Failure::Usage("--t-max A..B is required".into()))?;
        args.t_max_range = Some((first, last));
        // The options are checked at the largest block size, where the bounds that grow with it
        // (steps per batch) bind first.
        args.options.t_max = last;
    } else {
        args.options.t_max = t_max.ok_or_else(|| Failure::Usage("--t-max N is required".into()))?;
    }
    if let Some(text) = rank_text {
        // Only now is the world size known: --rank may come before --world-size.
        let last = args.options.world_size.saturating_sub(1);
        let rank = text.parse::<u32>().ok().filter(|&rank| rank <= last);
        let expected = format!("an integer from 0 to {last} (world_size - 1)");
        args.rank =
            Some(rank.ok_or_else(|| Error::invalid("--rank", format!("{text:?}"), expected))?);
    }
    Ok(Parsed::Run(args))
}

/// The value of `flag`: a lengths format's name (`bload lengths` takes it too).
pub fn lengths_format(flag: &str, text: &str) -> Result<LengthsFormat, Failure> {
    text.parse().map_err(|mut err: Error| {
        err.argument = flag.to_string();
        Failure::Input(err)
    })
}

/// The value of `flag`: an integer from `low` to `high` (which must fit in `T`).
fn number<T: TryFrom<u64>>(flag: &str, text: &str, (low, high): (u64, u64)) -> Result<T, Failure> {
    text.parse::<u64>()
        .ok()
        .filter(|value| (low..=high).contains(value))
        .and_then(|value| T::try_from(value).ok())
        .ok_or_else(|| {
            Failure::Input(Error::invalid(
                flag,
                format!("{text:?}"),
                format!("an integer from {low} to {high}"),
            ))
        })
}

/// The value of `flag` for `sweep`: `A..B`, block sizes with `1 <= A < B <= MAX_T_MAX` (one block
/// size is `bload stats`).
fn range(flag: &str, text: &str) -> Result<(u32, u32), Failure> {
    text.split_once("..")
        .and_then(|(first, last)| Some((first.parse::<u32>().ok()?, last.parse::<u32>().ok()?)))
        .filter(|&(first, last)| 1 <= first && first < last && last <= MAX_T_MAX)
        .ok_or_else(|| {
            Failure::Input(Error::invalid(
                flag,
                format!("{text:?}"),
                format!("a range A..B of block sizes, integers with 1 <= A < B <= {MAX_T_MAX}"),
            ))
        })
}

/// A `--source` value: the lengths file and its weight.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceArg {
    pub path: PathBuf,
    pub weight: f64,
}

/// `PATH:WEIGHT` (the weight after the last colon, so a path may hold colons).
pub fn parse_source(flag: &str, text: &str) -> Result<SourceArg, Failure> {
    let parsed = text
        .rsplit_once(':')
        .filter(|(path, _)| !path.is_empty())
        .and_then(|(path, weight)| Some((path, weight.parse::<f64>().ok()?)));
    let (path, weight) = parsed.ok_or_else(|| {
        let expected = "PATH:WEIGHT, a lengths file and its share of the epoch's steps (a number)";
        Error::invalid(flag, format!("{text:?}"), expected)
    })?;
    Ok(SourceArg {
        path: PathBuf::from(path),
        weight,
    })
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
