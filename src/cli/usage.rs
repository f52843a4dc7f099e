//! What `bload --help` and `bload COMMAND --help` print, and what follows a usage error: each
//! command's synopsis, what it does, and its options.
//!
//! Every option is described once, in `OPTIONS`, with the commands that take it, so that the help
//! of two commands cannot describe one flag two ways; each command's help lists its own.

use bload::{LengthsFormat, Policy};

/// The commands, with the synopsis the usage of bload and the command's help both show.
const COMMANDS: [(&str, &str); 4] = [
    (
        "stats",
        "  bload stats --lengths FILE --t-max N [--world-size W] [--blocks-per-batch B] [--seed S]
              [--epoch E] [--split] [--cost C] [--max-pieces N] [--truncate-to N] [--mix-to N] [--json]
  bload stats --source PATH:WEIGHT [--source PATH:WEIGHT ...] --t-max N [...]",
    ),
    (
        "plan",
        "  bload plan  --lengths FILE --t-max N --rank R [--world-size W] [--blocks-per-batch B]
              [--seed S] [--epoch E] [--split] [--policy P] [--cost C] [--max-pieces N] [--json]
  bload plan  --source PATH:WEIGHT [--source PATH:WEIGHT ...] --t-max N --rank R [...]",
    ),
    (
        "sweep",
        "  bload sweep --lengths FILE --t-max A..B [--world-size W] [--blocks-per-batch B] [--split]
              [--points N] [--json] [--plot FILE.svg] [--force]",
    ),
    (
        "lengths",
        "  bload lengths IN --out F.npy [--lengths-format NAME] [--dtype D]",
    ),
];

/// What each command does, below its synopsis in its help.
fn about(command: &str) -> &'static str {
    match command {
        "stats" => {
            "Plans the lengths in FILE with every packing policy ({policies})
at block size N, and prints what each costs beside the paper's baselines (truncate, mix) and the
lower bounds. Without --split, sequences longer than N are planned by lanes alone: the other rows
then say why they have no figures (in --json, an \"unavailable\" field)."
        }
        "plan" => {
            "Plans the lengths in FILE and prints rank R's batches of the epoch: each block as its pieces,
#sequence[steps of the sequence]@start in block, and its padding."
        }
        "lengths" => {
            "Reads the lengths file IN ({core_formats}) and writes its lengths to F.npy, a 1-D
NumPy array that every bload reader takes (--lengths F.npy, bload.read_lengths). Arrow and Parquet
columns are read by pyarrow: `python -m bload lengths IN --column C --out F.npy` writes their cache."
        }
        _ => {
            "Plans best_fit, pad_to_max and lanes at N block sizes from A to B (evenly spaced, both
included, and the longest length when it lies between them) and prints their blocks and padding
beside the lower bound: what stats prints at each t_max, to choose one. A block size too small
for the longest sequence, without --split, is a row that says so. On a terminal, a sweep that
takes more than a second shows its progress on stderr."
        }
    }
}

/// Every option: as the help shows it, what it means, and the commands that take it.
const OPTIONS: [(&str, &str, &[&str]); 23] = [
    (
        "--lengths FILE",
        "the sequences' lengths, a file of a format the core reads: {core_formats}",
        &["stats", "plan", "sweep"],
    ),
    (
        "--source PATH:WEIGHT",
        "a mixture in place of --lengths: each source a lengths file with its share of each
                         epoch's steps, repeated or drawn from to give it (docs/mixtures.md)",
        &["stats", "plan"],
    ),
    (
        "--lengths-format NAME",
        "{core_formats}; default: whatever FILE's first bytes or extension say",
        &["stats", "plan", "sweep", "lengths"],
    ),
    (
        "--out F.npy",
        "where to write the lengths' cache",
        &["lengths"],
    ),
    (
        "--dtype D",
        "the cache's dtype: int64 (the default) or int32",
        &["lengths"],
    ),
    ("--t-max N", "steps per block", &["stats", "plan"]),
    (
        "--t-max A..B",
        "the smallest and the largest block size, A < B",
        &["sweep"],
    ),
    (
        "--rank R",
        "the rank whose batches are printed, from 0 to W - 1",
        &["plan"],
    ),
    (
        "--world-size W",
        "data-parallel ranks (default 1)",
        &["stats", "plan", "sweep"],
    ),
    (
        "--blocks-per-batch B",
        "blocks in each batch of each rank (default 1; also --batch-blocks)",
        &["stats", "plan", "sweep"],
    ),
    (
        "--seed S",
        "seed of every random choice (default 0)",
        &["stats", "plan"],
    ),
    (
        "--epoch E",
        "the epoch planned (default 0)",
        &["stats", "plan"],
    ),
    (
        "--split",
        "chunk sequences longer than t_max (without it, lanes alone takes them)",
        &["stats", "plan", "sweep"],
    ),
    ("--max-pieces N", bload::MAX_PIECES_HELP, &["stats", "plan"]),
    (
        "--policy P",
        "{policies}; default {default_policy}",
        &["plan"],
    ),
    (
        "--cost C",
        "how blocks are dealt to ranks: steps (the default) or attention:A, a piece of
                         L steps costing A*L + L^2 (in stats: lanes rows are planned by steps;
                         the imbalance column is the costliest rank over the mean, mean / worst)",
        &["stats", "plan"],
    ),
    (
        "--truncate-to N",
        "row length of the truncate baseline (default the mean length)",
        &["stats"],
    ),
    (
        "--mix-to N",
        "row length of the mix baseline (default the mean length)",
        &["stats"],
    ),
    (
        "--points N",
        "block sizes to plan, from 2 to 1000 (default 24)",
        &["sweep"],
    ),
    (
        "--plot FILE.svg",
        "also draw the rows as an SVG chart",
        &["sweep"],
    ),
    (
        "--force",
        "run a sweep estimated to take more than about a minute (3 plans a block size,
                         each its sequences plus its t_max: past 2*10^9, it is refused)",
        &["sweep"],
    ),
    (
        "--json",
        "one JSON object instead of the text",
        &["stats", "plan", "sweep"],
    ),
    (
        "-h, --help",
        "print this help",
        &["stats", "plan", "sweep", "lengths"],
    ),
];

/// The help of `command`, or bload's usage when `command` is none of the commands (the program
/// name alone, `--help`, or a word bload does not know).
pub fn of(command: &str) -> String {
    let Some(&(name, synopsis)) = COMMANDS.iter().find(|(name, _)| *name == command) else {
        return usage();
    };
    let mut text = format!("usage:\n{synopsis}\n\n{}\n\n", about(name));
    for (flag, meaning, commands) in OPTIONS {
        if commands.contains(&name) {
            text.push_str(&format!("  {flag:<21}  {meaning}\n"));
        }
    }
    text.truncate(text.trim_end().len());
    with_core_lists(&text)
}

/// `text` with the lists the core declares in place of their placeholders: the help names the
/// policies and formats the core has, never a copy of them.
fn with_core_lists(text: &str) -> String {
    let core_formats: Vec<&str> = LengthsFormat::ALL
        .iter()
        .filter(|format| format.read_by_core())
        .map(|format| format.name())
        .collect();
    text.replace("{policies}", &Policy::names())
        .replace("{default_policy}", Policy::default().name())
        .replace("{core_formats}", &core_formats.join(", "))
}

/// bload's usage: every command's synopsis, and where to read more.
fn usage() -> String {
    let synopses: Vec<&str> = COMMANDS.iter().map(|(_, synopsis)| *synopsis).collect();
    format!(
        "usage:
{}
  bload COMMAND --help   what the command does, and its options
  bload --version

stats compares the packing policies and the paper's baselines at one block size; plan prints one
rank's batches with their block tables; sweep compares the padding of a range of block sizes, to
choose t_max; lengths writes a lengths file's binary cache. FILE holds the sequences' lengths: text
(one per line; blank lines and # comments are skipped), a 1-D integer .npy or a Megatron .idx.",
        synopses.join("\n")
    )
}

/// What `bload --version` prints: the package's version, which is also the Python package's,
/// the C++ library's and the CMake package's (all read from Cargo.toml, docs/versioning.md).
pub fn version() -> String {
    format!("bload {}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_belongs_to_a_command_and_every_command_has_help() {
        let names: Vec<&str> = COMMANDS.iter().map(|(name, _)| *name).collect();
        for (flag, _, commands) in OPTIONS {
            assert!(!commands.is_empty(), "{flag}");
            assert!(commands.iter().all(|c| names.contains(c)), "{flag}");
        }
        for name in names {
            let help = of(name);
            assert!(
                help.starts_with(&format!("usage:\n  bload {name}")),
                "{help}"
            );
            let input = if name == "lengths" {
                "IN --out"
            } else {
                "--lengths FILE"
            };
            assert!(help.contains(input) && help.ends_with("print this help"));
        }
        assert_eq!(of("frobnicate"), usage());
    }

    #[test]
    fn the_help_lists_what_the_core_declares() {
        for policy in Policy::ALL {
            assert!(of("plan").contains(policy.name()), "{}", of("plan"));
            assert!(of("stats").contains(policy.name()), "{}", of("stats"));
        }
        for format in LengthsFormat::ALL.iter().filter(|f| f.read_by_core()) {
            for command in ["stats", "plan", "sweep", "lengths"] {
                assert!(of(command).contains(format.name()), "{command}: {format}");
            }
        }
        for command in ["stats", "plan", "sweep", "lengths"] {
            assert!(!of(command).contains('{'), "{}", of(command));
        }
    }

    #[test]
    fn each_command_lists_only_its_own_options() {
        assert!(of("sweep").contains("--points N") && !of("stats").contains("--points"));
        assert!(of("plan").contains("--rank R") && !of("sweep").contains("--rank"));
        assert!(of("stats").contains("--truncate-to") && !of("plan").contains("--truncate-to"));
    }
}
