//! Running the `bload` binary as a user would, for the command-line tests (cli.rs, cli_sweep.rs).

use std::process::{Command, Output};

/// The bundled Action-Genome-shaped lengths, relative to the crate root (the commands' directory).
pub const AG: &str = "examples/data/action_genome_like.lengths";

pub fn bload_args(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bload"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// Runs a command line given as one string of words; `AG` stands for the bundled
/// Action-Genome-shaped lengths.
pub fn bload(line: &str) -> Output {
    let words: Vec<&str> = line
        .split_whitespace()
        .map(|word| if word == "AG" { AG } else { word })
        .collect();
    bload_args(&words)
}

/// The JSON object a successful command line prints (`--json`).
pub fn json(line: &str) -> serde_json::Value {
    let out = bload(line);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap()
}
