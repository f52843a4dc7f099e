//! `bload sweep`: what a range of block sizes costs, to choose `t_max`.
//!
//! At each block size it plans `best_fit`, `pad_to_max` and `lanes` (whose rows carry state
//! across batches, see `Policy::Lanes`) and takes the packing lower bound:
//! the numbers `bload stats` prints for that `t_max` (the same planner, the same `cost`). A block
//! size the planner refuses (sequences longer than it, without `--split`) is a row that says why,
//! not the end of the sweep: the rows either side of the longest sequence are the ones wanted.
//! A sweep of a large set takes seconds: on a terminal, it says on stderr which block size it
//! plans (`cli/progress.rs`).

use crate::cli::args::Args;
use crate::cli::progress::Progress;
use crate::cli::svg::{self, Chart, Line};
use crate::cli::sweep_work;
use crate::{copy_of, Failure};
use bload::{read_lengths_as, write_whole, Error, Options, Oversize, Planner, Policy};
use serde_json::{json, Value};
use std::io::Write;

/// Block sizes planned when `--points` is not given: enough for the chart's curves to read as
/// curves, few enough that a sweep of a large dataset takes seconds.
const DEFAULT_POINTS: u32 = 24;

/// The columns: name in JSON, label in the table and the chart's legend.
const METHODS: [(&str, &str); 4] = [
    ("best_fit", "best_fit"),
    ("pad_to_max", "pad_to_max"),
    ("lanes", "lanes"),
    ("lower_bound", "lower bound"),
];
/// The column of the packing lower bound.
const BOUND: usize = METHODS.len() - 1;

/// Blocks and padding steps of one method at one block size.
#[derive(Clone, Copy, Default)]
struct Cost {
    blocks: u64,
    padding: u64,
    /// Padding over the steps of all blocks, from 0 to 1.
    share: f64,
}

impl Cost {
    fn new(blocks: u64, padding: u64, t_max: u32) -> Self {
        // A plan has at least one block (a lengths file at least one sequence).
        let computed = (blocks * u64::from(t_max)).max(1);
        Cost {
            blocks,
            padding,
            share: padding as f64 / computed as f64,
        }
    }
}

/// One block size: the costs in `METHODS` order, or the planner's reason to refuse it.
struct Row {
    t_max: u32,
    costs: Result<[Cost; METHODS.len()], Error>,
}

pub fn run(args: Args, out: &mut impl Write) -> Result<(), Failure> {
    let (first, last) = args
        .t_max_range
        .ok_or_else(|| Failure::Usage("--t-max A..B is required".into()))?;
    // At the last block size, where the bounds that grow with t_max bind: a batch shape too large
    // is one error, not a note on every row.
    args.options.validate()?;
    let lengths = read_lengths_as(&args.lengths, args.lengths_format)?;
    let longest = lengths.iter().copied().max().unwrap_or_default();
    let split = args.options.oversize == Oversize::Split;
    let mut t_maxes = spread(first, last, args.points.unwrap_or(DEFAULT_POINTS));
    if !split && first < longest && longest < last {
        // The smallest block size that takes every sequence whole: the row wanted first.
        t_maxes.push(longest);
        t_maxes.sort_unstable();
        t_maxes.dedup();
    }
    let sequences = lengths.len() as u64;
    let steps: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    let work = sweep_work::estimate(sequences, steps, longest, split, &t_maxes);
    if work > sweep_work::MAX_WORK && !args.force {
        let asked = args.points.unwrap_or(DEFAULT_POINTS);
        let range = (first, last);
        return Err(sweep_work::too_much(work, range, asked, t_maxes.len(), sequences).into());
    }
    let mut rows = Vec::new();
    let mut progress = Progress::on_stderr();
    let points = t_maxes.len();
    for (number, t_max) in (1..).zip(t_maxes) {
        let costs = if t_max < longest && !split {
            // What the planner would say, said shorter, without copying the lengths to hear it.
            Err(Error::invalid(
                "t_max",
                t_max,
                format!("at least the longest sequence ({longest} steps), or --split"),
            ))
        } else {
            costs(&lengths, &args.options, t_max, |policy| {
                progress.show(|| {
                    format!("bload sweep: t_max {t_max} ({number} of {points}), planning {policy}")
                })
            })?
        };
        rows.push(Row { t_max, costs });
    }
    // Before anything is written: the output starts on a clean line.
    progress.finish();
    if rows.iter().all(|row| row.costs.is_err()) {
        // Nothing to show: the reason at the largest block size, which is the range's own when
        // even that is too small for the longest sequence.
        let reason = match rows.last().map(|row| &row.costs) {
            Some(Err(reason)) if last >= longest || split => reason.clone(),
            _ => Error::invalid(
                "--t-max",
                format!("\"{first}..{last}\""),
                format!(
                    "a range that reaches the longest sequence ({longest} steps), or --split to \
                     cut longer sequences into chunks"
                ),
            ),
        };
        return Err(reason.into());
    }

    let whole = if split {
        "longer sequences split"
    } else {
        "whole sequences"
    };
    let o = &args.options;
    let about = [
        format!(
            "{} sequences, {steps} steps, longest {longest}",
            lengths.len()
        ),
        format!(
            "{} rank(s) x {} block(s) per batch, {whole}",
            o.world_size, o.blocks_per_batch
        ),
    ];
    if let Some(path) = &args.plot {
        let mut name = args.lengths.display().to_string();
        if name.chars().count() > 56 {
            // A long path would run off the chart; its file name still names it.
            let file = args
                .lengths
                .file_name()
                .unwrap_or_default()
                .to_string_lossy();
            name = format!(".../{file}");
        }
        let title = format!("Padding by block size: {name}");
        let subtitle = about.join("; ");
        let svg = chart(&rows, &title, &subtitle, (first, last), longest, split);
        // Whole or not at all, as every output file (a full disk keeps the old chart).
        write_whole(path, "--plot", svg.len() as u64, |out| {
            out.write_all(svg.as_bytes())
        })?;
    }
    if args.json {
        let document = json!({
            "lengths": args.lengths.display().to_string(),
            "sequences": lengths.len(),
            "steps": steps,
            "longest": longest,
            "options": {
                "t_max": {"first": first, "last": last},
                "points": args.points.unwrap_or(DEFAULT_POINTS),
                "world_size": o.world_size,
                "blocks_per_batch": o.blocks_per_batch,
                "split": split,
            },
            "rows": rows.iter().map(row_json).collect::<Vec<_>>(),
        });
        return Ok(writeln!(out, "{document}")?);
    }
    writeln!(out, "{}: {}", args.lengths.display(), about[0])?;
    writeln!(
        out,
        "t_max {first}..{last} in {} points, {}",
        rows.len(),
        about[1]
    )?;
    Ok(write_table(out, &rows)?)
}

/// The rows as a table: blocks and padding share of each method, or why a row was not planned.
fn write_table(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    let groups: String = METHODS
        .iter()
        .map(|(_, label)| format!("  {label:^19}"))
        .collect();
    write!(out, "{:>7}{}\n{:>7}", "", groups.trim_end(), "t_max")?;
    for _ in METHODS {
        write!(out, "  {:>10} {:>8}", "blocks", "padding")?;
    }
    writeln!(out)?;
    for row in rows {
        write!(out, "{:>7}", row.t_max)?;
        match &row.costs {
            Ok(costs) => {
                for cost in costs {
                    write!(out, "  {:>10} {:>7.2}%", cost.blocks, cost.share * 100.0)?;
                }
            }
            Err(reason) => write!(out, "  not planned: {reason}")?,
        }
        writeln!(out)?;
    }
    Ok(())
}

/// `points` integers spread evenly from `first` to `last`, both included, each once (a range of
/// fewer integers than points gives every integer). Evenly, not geometrically: the chart's axis is
/// linear, and block sizes worth comparing are seldom more than a few times apart.
fn spread(first: u32, last: u32, points: u32) -> Vec<u32> {
    let gaps = u64::from(points.max(2) - 1);
    let width = u64::from(last - first);
    let mut t_maxes: Vec<u32> = (0..=gaps)
        // Rounded to the nearest integer; at most `width`, so it fits.
        .map(|i| first + ((i * width + gaps / 2) / gaps) as u32)
        .collect();
    // Ascending, so repeats are neighbours.
    t_maxes.dedup();
    t_maxes
}

/// The costs at `t_max`, or the planner's reason to refuse it (fewer pieces than a global batch
/// has blocks, with --split at large block sizes). Failures while planning (no memory) end the
/// sweep. `before` is told each policy before it is planned (for the progress line).
fn costs(
    lengths: &[u32],
    options: &Options,
    t_max: u32,
    mut before: impl FnMut(Policy),
) -> Result<Result<[Cost; METHODS.len()], Error>, Failure> {
    let mut costs = [Cost::default(); METHODS.len()];
    let policies = [Policy::BestFit, Policy::PadToMax, Policy::Lanes];
    for (slot, policy) in policies.into_iter().enumerate() {
        before(policy);
        let options = Options {
            t_max,
            policy,
            ..options.clone()
        };
        let planner = match Planner::new(copy_of(lengths)?, options) {
            Ok(planner) => planner,
            Err(reason) => return Ok(Err(reason)),
        };
        // Blocks and padding from the plan's shape, not its stats, which would measure the
        // ranks' imbalance too (a pass over every piece that a sweep has no use for).
        let blocks = planner.plan(0)?.num_blocks() as u64;
        let padding = blocks * u64::from(t_max) - planner.steps();
        costs[slot] = Cost::new(blocks, padding, t_max);
        // The same for every packing policy: it bounds any packing of these lengths and options.
        if !policy.carries_state() {
            let bound = planner.lower_bound();
            costs[BOUND] = Cost::new(bound.blocks, bound.padding, t_max);
        }
    }
    Ok(Ok(costs))
}

fn row_json(row: &Row) -> Value {
    let mut fields = serde_json::Map::new();
    fields.insert("t_max".into(), json!(row.t_max));
    for (slot, (name, _)) in METHODS.iter().enumerate() {
        let value = match &row.costs {
            Ok(costs) => json!({
                "blocks": costs[slot].blocks,
                "padding": costs[slot].padding,
                "padding_share": costs[slot].share,
            }),
            Err(_) => Value::Null,
        };
        fields.insert(name.to_string(), value);
    }
    let reason = row.costs.as_ref().err().map(Error::to_string);
    fields.insert("reason".into(), json!(reason));
    Value::Object(fields)
}

/// The chart of `rows`: padding in percent against t_max, a line per method, with the block sizes
/// too small for the longest sequence shaded when they were not split.
fn chart(
    rows: &[Row],
    title: &str,
    subtitle: &str,
    (first, last): (u32, u32),
    longest: u32,
    split: bool,
) -> String {
    // best_fit wide and solid, the bound dashed and narrow on top of it, without markers to hide
    // best_fit's: where best_fit reaches the bound, both stay visible.
    let styles = [
        ("#1f77b4", 3.5, None),
        ("#d62728", 2.0, None),
        ("#2ca02c", 2.5, None),
        ("#222222", 1.5, Some("6 4")),
    ];
    let lines = METHODS
        .iter()
        .zip(styles)
        .enumerate()
        .map(|(slot, (&(_, label), (color, width, dash)))| Line {
            label,
            color,
            width,
            dash,
            points: rows
                .iter()
                .map(|row| {
                    let cost = row.costs.as_ref().ok()?[slot];
                    let tip = format!(
                        "t_max {}: {label} {:.2}% padding, {} blocks",
                        row.t_max,
                        cost.share * 100.0,
                        cost.blocks
                    );
                    Some((f64::from(row.t_max), cost.share * 100.0, tip))
                })
                .collect(),
        })
        .collect();
    let shade = (!split && first < longest).then(|| {
        let end = f64::from(longest.min(last));
        let note = [
            "t_max < longest".to_string(),
            format!("sequence ({longest}):"),
            "no plan without".to_string(),
            "--split".to_string(),
        ];
        (f64::from(first), end, note)
    });
    svg::render(&Chart {
        title,
        subtitle,
        x_label: "t_max (steps per block)",
        y_label: "padding (% of computed steps)",
        x_range: (f64::from(first), f64::from(last)),
        lines,
        shade,
    })
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_includes_both_ends_once() {
        assert_eq!(spread(30, 300, 4), [30, 120, 210, 300]);
        assert_eq!(spread(1, 2, 24), [1, 2]);
        assert_eq!(spread(5, 9, 24), [5, 6, 7, 8, 9]);
        let wide = spread(1, 1 << 24, 1000);
        assert_eq!((wide.len(), wide[0], wide[999]), (1000, 1, 1 << 24));
        assert!(wide.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(spread(10, 20, 2), [10, 20]);
    }
}
