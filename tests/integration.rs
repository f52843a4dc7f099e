//! bload's integration tests, as one test binary: each file of tests/ is a module of it (the
//! core's API, the plans' contract and golden hashes, the `bload` command), and `common` and
//! `cli_support` hold what they share. One binary rather than one per file because each binary
//! links the crate and its dependencies again: 23 of them made most of `make test`'s Rust build.
//! `cargo test --test integration golden::` runs one file's tests.

mod cli_support;
mod common;

mod cli;
mod cli_cost;
mod cli_help;
mod cli_lengths_out;
mod cli_max_pieces;
mod cli_memory;
mod cli_mixture;
mod cli_output;
mod cli_sweep;
mod cli_sweep_work;
mod cli_version;
mod contract;
mod datasets;
mod epochs;
mod errors;
mod golden;
mod lanes;
mod lengths_formats;
mod lengths_input;
mod resume;
mod shared_plan_faults;
mod state;
mod store_layout;
