//! `bload stats`: what each packing policy and each of the paper's baselines costs on one set of
//! lengths at one block size, beside the lower bounds.
//!
//! A policy that cannot plan the lengths is a row that says why, not the end of the command:
//! without `--split`, sequences longer than `t_max` are refused by every policy but `lanes`
//! (which serves them across batches), and the rows that can be planned are the ones wanted.
//! Which policies refuse is the core's to say, so each is asked (`Planner::new`), not listed
//! here. In JSON such a row is `{"unavailable": WHY}` in place of its figures, so that a reader
//! tells it by that key alone, and a bound that no plan gave is `null`.

use crate::cli::args::Args;
use crate::{copy_of, cost, Failure};
use bload::stats::{mix, truncate};
use bload::{read_lengths_as, Cost, LowerBound, MethodStats, Options, Oversize, Planner, Policy};
use serde_json::{json, Value};
use std::io::Write;
use std::time::Instant;

/// One row of the table: its label, its name in JSON, and its figures or why it has none.
struct Row {
    label: String,
    name: &'static str,
    cost: Result<MethodStats, String>,
}

pub fn run(args: Args, out: &mut impl Write) -> Result<(), Failure> {
    // Options that no policy could plan with (a batch shape too large) are one error, not a
    // reason on every row.
    args.options.validate()?;
    // A mixture's epoch is its chosen sequences, planned as one lengths set: the same blocks.
    let (lengths, sources) = if args.sources.is_empty() {
        (
            read_lengths_as(&args.lengths, args.lengths_format)?,
            Vec::new(),
        )
    } else {
        let mut options = args.options.clone();
        options.oversize = Oversize::Split; // the choice does not depend on it; the rows do
        let mixture = crate::cli::mixture::planner_of(&args, options)?;
        (
            mixture.epoch_lengths(args.epoch)?,
            mixture.source_stats(args.epoch)?,
        )
    };
    let steps: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    let longest = lengths.iter().copied().max().unwrap_or_default();
    // A lengths file holds at least one length (read_lengths checks).
    let mean = (steps / lengths.len().max(1) as u64) as u32;
    let truncate_to = args.truncate_to.unwrap_or(mean);
    let mix_to = args.mix_to.unwrap_or(mean);
    let o = &args.options;
    let too_long = match o.oversize {
        Oversize::Split => 0,
        Oversize::Reject => lengths.iter().filter(|&&l| l > o.t_max).count(),
    };
    let needs_split = match too_long {
        1 => "needs --split: 1 sequence is longer than t_max".to_string(),
        n => format!("needs --split: {n} sequences are longer than t_max"),
    };

    let mut rows = Vec::new();
    // The packing policies share one bound; lanes, whose rows run for the whole epoch, another.
    let (mut bound, mut lanes_bound) = (None, None);
    // Why lanes could not plan, when it is not for want of --split (it takes any length).
    let mut lanes_refused = None;
    for policy in Policy::ALL {
        // Lanes keep their rows all epoch and so cannot be dealt by cost (the core refuses
        // both): their row is planned by steps and measured in the cost asked, like the others.
        let planned_cost = if policy.carries_state() {
            Cost::Steps
        } else {
            o.cost
        };
        let options = Options {
            policy,
            cost: planned_cost,
            ..o.clone()
        };
        let start = Instant::now();
        let planner = match Planner::new(copy_of(&lengths)?, options) {
            Ok(planner) => planner,
            // The core refuses sequences longer than t_max naming t_max (the options themselves
            // were checked above); any other refusal, running out of memory included, is the
            // command's error.
            Err(err) if too_long > 0 && err.argument == "t_max" => {
                rows.push(Row::from(policy, Err(needs_split.clone())));
                continue;
            }
            // Lanes refuse a cap on pieces: the row says so, in the core's words.
            Err(err) if err.argument == "max_pieces" => {
                let why = format!("--max-pieces: {}", err.expected);
                rows.push(Row::from(policy, Err(why.clone())));
                lanes_refused = Some(why);
                continue;
            }
            // Lanes run whole sequences (no --split), so they may find fewer pieces than a
            // global batch's blocks where the packing policies, splitting, do not: their row
            // says why, and the others are still planned.
            Err(err) if policy.carries_state() => {
                let why = err.to_string();
                rows.push(Row::from(policy, Err(why.clone())));
                lanes_refused = Some(why);
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        *(if policy.carries_state() {
            &mut lanes_bound
        } else {
            &mut bound
        }) = Some(planner.lower_bound());
        let plan = planner.plan(args.epoch)?;
        // The planning alone: measuring the imbalance (when the stats are read) is not timed.
        let plan_ms = milliseconds_since(start);
        let mut row = cost(&plan);
        row.plan_ms = plan_ms;
        if policy.carries_state() {
            // Planned by steps; measured in the cost asked, as the other rows are.
            row.rank_cost_imbalance = Some(plan.rank_cost_imbalance(o.cost));
        }
        rows.push(Row::from(policy, Ok(row)));
    }
    let start = Instant::now();
    let mut cut = truncate(&lengths, truncate_to, o)?;
    cut.plan_ms = milliseconds_since(start);
    rows.push(Row {
        label: format!("truncate({truncate_to})"),
        name: "truncate",
        cost: Ok(cut),
    });
    let start = Instant::now();
    let mut mixed = mix(&lengths, mix_to, o)?;
    mixed.plan_ms = milliseconds_since(start);
    rows.push(Row {
        label: format!("mix({mix_to})"),
        name: "mix",
        cost: Ok(mixed),
    });

    if args.json {
        let policies: serde_json::Map<String, Value> = rows
            .iter()
            .map(|row| {
                let value = match &row.cost {
                    Ok(cost) => json!(cost),
                    Err(why) => json!({ "unavailable": why }),
                };
                (row.name.to_string(), value)
            })
            .collect();
        let mut document = json!({
            "lower_bound_padding": bound.map(|bound| bound.padding),
            "lanes_lower_bound_padding": lanes_bound.map(|bound| bound.padding),
            "policies": policies,
        });
        if !sources.is_empty() {
            document["sources"] = json!(sources);
        }
        return Ok(writeln!(out, "{document}")?);
    }
    writeln!(
        out,
        "{}: {} sequences, {} steps, longest {}",
        if sources.is_empty() {
            args.lengths.display().to_string()
        } else {
            format!(
                "a mixture of {} sources, epoch {}",
                sources.len(),
                args.epoch
            )
        },
        lengths.len(),
        steps,
        longest,
    )?;
    crate::cli::mixture::write_sources(out, &sources)?;
    write!(
        out,
        "t_max {}, {} rank(s) x {} block(s) per batch, seed {}, epoch {}, cost {}",
        o.t_max, o.world_size, o.blocks_per_batch, o.seed, args.epoch, o.cost
    )?;
    match o.max_pieces {
        Some(cap) => writeln!(out, ", at most {cap} pieces a block")?,
        None => writeln!(out)?,
    }
    writeln!(
        out,
        "{:<14} {:>9} {:>10} {:>9} {:>11} {:>9} {:>15}",
        "method", "blocks", "padding", "deleted", "efficiency", "plan_ms", "imbalance"
    )?;
    for row in &rows {
        match &row.cost {
            Ok(cost) => writeln!(
                out,
                "{:<14} {:>9} {:>10} {:>9} {:>10.2}% {:>9.2} {:>15}",
                row.label,
                cost.blocks,
                cost.padding,
                cost.deleted,
                cost.efficiency * 100.0,
                cost.plan_ms,
                cost.rank_cost_imbalance
                    .map_or("-".into(), |imbalance| format!(
                        "{:.2} / {:.2}",
                        imbalance.mean, imbalance.worst
                    )),
            )?,
            Err(why) => writeln!(out, "{:<14} {why}", row.label)?,
        }
    }
    let bounds = [
        ("lower bound", bound, &needs_split),
        (
            "lanes bound",
            lanes_bound,
            lanes_refused.as_ref().unwrap_or(&needs_split),
        ),
    ];
    for (label, bound, why) in bounds {
        match bound {
            Some(LowerBound {
                blocks, padding, ..
            }) => writeln!(out, "{label:<14} {blocks:>9} {padding:>10}")?,
            // No policy that this bound bounds could plan: it has the same reason.
            None => writeln!(out, "{label:<14} {why}")?,
        }
    }
    Ok(())
}

impl Row {
    fn from(policy: Policy, cost: Result<MethodStats, String>) -> Self {
        Row {
            label: policy.name().into(),
            name: policy.name(),
            cost,
        }
    }
}

fn milliseconds_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}
