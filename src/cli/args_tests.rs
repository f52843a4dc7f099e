//! The command line's parsing: every option, and the errors of each malformed one.

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
