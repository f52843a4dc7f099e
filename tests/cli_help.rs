//! The `bload` command line's conventions, run as a user would: `--help` and `-h` on bload and
//! on every command print that help on stdout and exit 0, `--version` and `-V` print the
//! version, and a malformed command line is still an error with exit code 2 and the usage.

use crate::cli_support;

use cli_support::bload;
use std::process::Output;

const COMMANDS: [&str; 3] = ["stats", "plan", "sweep"];

/// stdout of a run that must succeed quietly: exit 0, nothing on stderr.
fn quiet_stdout(line: &str, output: Output) -> String {
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{line}: {err}");
    assert!(err.is_empty(), "{line}: {err}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn each_command_prints_its_own_help_for_either_flag() {
    for command in COMMANDS {
        let long = quiet_stdout(command, bload(&format!("{command} --help")));
        let synopsis = format!("usage:\n  bload {command} ");
        assert!(
            long.starts_with(&synopsis) && long.contains("--lengths FILE"),
            "{long}"
        );
        assert!(long.contains("  -h, --help"), "{long}");
        // The command's own synopsis only.
        for other in COMMANDS.iter().filter(|&&other| other != command) {
            assert!(
                !long.contains(&format!("bload {other}")),
                "{command}: {long}"
            );
        }
        // -h, `bload help COMMAND`, and --help beside other words (even bad ones) say the same.
        for line in [
            format!("{command} -h"),
            format!("help {command}"),
            format!("{command} --lengths AG --t-max 94 --help"),
            format!("{command} --no-such-flag -h"),
        ] {
            assert_eq!(quiet_stdout(&line, bload(&line)), long, "{line}");
        }
    }
    // Each command's options, and only its own.
    let help = |command: &str| quiet_stdout(command, bload(&format!("{command} --help")));
    assert!(help("plan").contains("--rank R") && help("plan").contains("--policy P"));
    assert!(help("sweep").contains("--t-max A..B") && help("sweep").contains("--plot FILE.svg"));
    assert!(help("stats").contains("--truncate-to N") && !help("stats").contains("--rank"));
}

#[test]
fn bload_prints_its_usage_for_either_flag() {
    let usage = quiet_stdout("--help", bload("--help"));
    assert!(usage.starts_with("usage:\n"), "{usage}");
    for command in COMMANDS {
        assert!(usage.contains(&format!("  bload {command}")), "{usage}");
    }
    assert!(usage.contains("bload COMMAND --help") && usage.contains("bload --version"));
    for line in ["-h", "help"] {
        assert_eq!(quiet_stdout(line, bload(line)), usage, "{line}");
    }
}

#[test]
fn the_version_is_the_package_version() {
    let expected = format!("bload {}\n", env!("CARGO_PKG_VERSION"));
    for line in ["--version", "-V"] {
        assert_eq!(quiet_stdout(line, bload(line)), expected, "{line}");
    }
}

#[test]
fn a_malformed_command_line_is_still_a_usage_error() {
    for (line, message, usage_of) in [
        (
            "stats --lengths AG --t-max 94 --frob",
            "unknown option \"--frob\" for stats",
            "stats",
        ),
        (
            "plan --lengths AG --t-max 94",
            "--rank R is required",
            "plan",
        ),
        ("sweep --lengths AG", "--t-max A..B is required", "sweep"),
        ("stats --t-max 94", "--lengths FILE is required", "stats"),
        (
            "sweep --lengths AG --t-max",
            "--t-max needs a value",
            "sweep",
        ),
        ("frobnicate", "unknown command \"frobnicate\"", ""),
        ("help frobnicate", "unknown command \"frobnicate\"", ""),
        ("", "a command is required", ""),
    ] {
        let out = bload(line);
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(out.stdout.is_empty(), "{line}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.starts_with(&format!("bload: {message}\nusage:\n")),
            "{line}: {err}"
        );
        // The usage of the command the words were given to, or bload's.
        let expected = if usage_of.is_empty() {
            quiet_stdout("--help", bload("--help"))
        } else {
            quiet_stdout(usage_of, bload(&format!("{usage_of} --help")))
        };
        assert!(err.ends_with(&expected), "{line}: {err}");
    }
}
