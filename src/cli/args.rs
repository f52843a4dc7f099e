//! The command line's words: flags, their values and the bounds each value must lie in.
//!
//! A value out of bounds is an error naming the flag, the value as typed and the real bounds, so
//! that `--t-max 99999999` is told the largest block size rather than "a non-negative integer".

use crate::cli::mixture::{parse_source, SourceArg};
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    /// The arguments of `line`, which must be accepted as a run.
    fn accepted(command: &str, line: &str) -> Args {
        match parse_args(command, &words(line)) {
            Ok(Parsed::Run(args)) => args,
            Ok(Parsed::Help) => panic!("{line}: read as asking for help"),
            Err(_) => panic!("{line}: refused"),
        }
    }

    fn error(command: &str, line: &str) -> Error {
        match parse_args(command, &words(line)) {
            Err(Failure::Input(err)) => err,
            Err(_) => panic!("{line}: a usage error, not an input error"),
            Ok(_) => panic!("{line}: accepted"),
        }
    }

    #[test]
    fn each_flag_names_its_real_bounds() {
        for (line, flag, value, expected) in [
            (
                "--t-max 16777217",
                "--t-max",
                "16777217",
                "from 1 to 16777216",
            ),
            ("--t-max 0", "--t-max", "0", "from 1 to 16777216"),
            (
                "--world-size 4294967296",
                "--world-size",
                "4294967296",
                "from 1 to 4294967295",
            ),
            (
                "--blocks-per-batch 0",
                "--blocks-per-batch",
                "0",
                "from 1 to 4294967295",
            ),
            (
                "--batch-blocks -1",
                "--batch-blocks",
                "-1",
                "from 1 to 4294967295",
            ),
            (
                "--seed 9223372036854775808",
                "--seed",
                "9223372036854775808",
                "from 0 to 9223372036854775807",
            ),
            (
                "--epoch 1.5",
                "--epoch",
                "1.5",
                "from 0 to 9223372036854775806",
            ),
        ] {
            // (A flag once: the t_max cases give their own.)
            let base = if flag == "--t-max" {
                "--lengths x"
            } else {
                "--lengths x --t-max 9"
            };
            let err = error("plan", &format!("{base} {line}"));
            assert_eq!(err.argument, flag, "{line}");
            assert_eq!(err.value, format!("{value:?}"), "{line}");
            assert_eq!(err.expected, format!("an integer {expected}"), "{line}");
        }
        for line in ["--truncate-to 0", "--mix-to 4294967296"] {
            let err = error("stats", &format!("--lengths x --t-max 9 {line}"));
            assert_eq!(err.expected, "an integer from 1 to 4294967295", "{line}");
        }
    }

    #[test]
    fn the_rank_is_bounded_by_the_world_size_given_before_or_after_it() {
        for line in ["--rank 3 --world-size 3", "--world-size 3 --rank 3"] {
            let err = error("plan", &format!("--lengths x --t-max 9 {line}"));
            assert_eq!(
                (err.argument.as_str(), err.value.as_str()),
                ("--rank", "\"3\"")
            );
            assert_eq!(err.expected, "an integer from 0 to 2 (world_size - 1)");
        }
        let err = error("plan", "--lengths x --t-max 9 --rank 99999999999");
        assert_eq!(err.expected, "an integer from 0 to 0 (world_size - 1)");
        let args = accepted("plan", "--rank 2 --lengths x --t-max 9 --world-size 3");
        assert_eq!(args.rank, Some(2));
    }

    #[test]
    fn an_option_given_twice_is_refused_and_a_source_may_be() {
        for line in [
            "--lengths x --lengths y --t-max 9",
            "--lengths x --t-max 9 --t-max 10",
            "--lengths x --t-max 9 --batch-blocks 2 --blocks-per-batch 3",
            "--lengths x --t-max 9 --split --split",
        ] {
            let Err(Failure::Usage(message)) = parse_args("stats", &words(line)) else {
                panic!("{line}: accepted");
            };
            assert!(
                message.contains("is given twice: each option once"),
                "{line}: {message}"
            );
        }
        let sources = "--source a:1 --source b:2 --t-max 9";
        assert!(parse_args("stats", &words(sources)).is_ok());
    }

    #[test]
    fn extremes_in_bounds_are_accepted() {
        let line = "--lengths x --t-max 16777216 --world-size 4294967295 --blocks-per-batch 1 \
                    --seed 9223372036854775807 --epoch 9223372036854775806";
        let args = accepted("stats", line);
        assert_eq!(args.options.t_max, MAX_T_MAX);
        assert_eq!(args.options.world_size, u32::MAX);
        assert_eq!(
            (args.options.seed, args.epoch),
            (MAX_SEED, MAX_EPOCH as u64)
        );
    }

    #[test]
    fn a_sweep_takes_a_range_and_plans_up_to_its_end() {
        let line = "--lengths x --t-max 30..300 --points 5 --plot c.svg";
        let args = accepted("sweep", line);
        assert_eq!(args.t_max_range, Some((30, 300)));
        assert_eq!((args.options.t_max, args.points), (300, Some(5)));
        assert_eq!(args.plot, Some(PathBuf::from("c.svg")));
        for value in [
            "30",
            "0..5",
            "9..3",
            "a..b",
            "4..4",
            "1..16777217",
            "-1..3",
            "1..2..3",
        ] {
            let err = error("sweep", &format!("--lengths x --t-max {value}"));
            assert_eq!(err.argument, "--t-max");
            assert_eq!(err.value, format!("{value:?}"));
            assert!(err.expected.starts_with("a range A..B"), "{value}");
        }
        // One block size is for stats and plan, which refuse a range.
        let err = error("stats", "--lengths x --t-max 30..300");
        assert_eq!(err.expected, "an integer from 1 to 16777216");
    }

    #[test]
    fn a_bad_policy_names_the_flag() {
        let err = error("plan", "--lengths x --t-max 9 --policy tetris");
        assert_eq!(
            (err.argument.as_str(), err.value.as_str()),
            ("--policy", "\"tetris\"")
        );
    }

    #[test]
    fn help_is_asked_for_anywhere_among_the_words_even_beside_bad_ones() {
        for line in [
            "--help",
            "-h",
            "--lengths x --help",
            "--t-max 0..5 -h",
            "--frobnicate --help",
        ] {
            for command in ["stats", "plan", "sweep"] {
                let parsed = parse_args(command, &words(line));
                assert!(matches!(parsed, Ok(Parsed::Help)), "{command} {line}");
            }
        }
    }
}
