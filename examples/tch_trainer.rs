//! Trains a recurrent model on packed blocks with tch, on one rank: the bundled
//! Action-Genome-shaped lengths, the running-sum task of the DDP trainers, packed by
//! `bload::tch::pack_batch`. `--model gru` (default) is a GRU cell stepped in Rust, its state
//! zeroed where the reset mask says; `--model FILE.pt` loads a TorchScript model, such as the
//! scripted `bload.nn.PackedGRU` that examples/packed_gru.py saves (which calls
//! `torch.ops.bload.reset_mask`), with `tch::CModule`, after
//! `bload::tch::load_plugin`. `--policy NAME` picks how blocks are planned (any name
//! `bload::Policy` parses; best_fit by default). With `--policy lanes` every row of a batch is a
//! lane for the whole epoch and the model carries its state from one batch to the next
//! (truncated back-propagation): each row goes on from its lane's final state of the previous
//! batch, detached, where the batch's `carry` says (the TorchScript model's `forward_lanes`), so
//! that sequences longer than `--t-max` are seen whole. Run through `make test-tch`, or:
//!
//!     LIBTORCH_USE_PYTORCH=1 VIRTUAL_ENV=$PWD/.venv PATH=$PWD/.venv/bin:$PATH \
//!         cargo run --release --features tch --example tch_trainer -- --model build/packed_gru.pt
//!
//! and add `--policy lanes --t-max 32` for lanes of 32 steps a batch.

use bload::tch::{load_plugin, pack_batch, PackOptions, PackedBatch};
use bload::{read_lengths, Options, Planner, Policy};
use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;
use tch::nn::{self, OptimizerConfig};
use tch::{CModule, Device, IValue, Kind, TchError, Tensor};

const FEATURES: i64 = 16;
const HIDDEN: i64 = 64;

struct Args {
    model: String,
    policy: Policy,
    lengths: PathBuf,
    sequences: usize,
    epochs: u64,
    t_max: u32,
    blocks_per_batch: u32,
    seed: u64,
    lr: f64,
    library: PathBuf,
}

fn parse() -> Result<Args, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = Args {
        model: "gru".into(),
        policy: Policy::default(),
        lengths: root.join("examples/data/action_genome_like.lengths"),
        sequences: 0,
        epochs: 1,
        t_max: 94,
        blocks_per_batch: 8,
        seed: 0,
        lr: 0.01,
        library: std::env::var_os("BLOAD_LIBRARY")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("build/libbload.so")),
    };
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let value = words
            .next()
            .ok_or(format!("{flag}: expected a value after it"))?;
        let number = |value: &str| {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} = {value:?}: expected a non-negative integer"))
        };
        match flag.as_str() {
            "--model" => args.model = value,
            // The core's names; its error says what it expected.
            "--policy" => {
                args.policy = value.parse().map_err(|err: bload::Error| {
                    format!("--policy = {value:?}: expected {}", err.expected)
                })?
            }
            "--lengths" => args.lengths = value.into(),
            "--sequences" => args.sequences = number(&value)? as usize,
            "--epochs" => args.epochs = number(&value)?,
            "--t-max" => args.t_max = number(&value)? as u32,
            "--blocks-per-batch" => args.blocks_per_batch = number(&value)? as u32,
            "--seed" => args.seed = number(&value)?,
            "--lr" => {
                args.lr = value
                    .parse()
                    .map_err(|_| format!("--lr = {value:?}: expected a number"))?
            }
            "--library" => args.library = value.into(),
            _ => return Err(format!("unknown option {flag:?}")),
        }
    }
    Ok(args)
}

/// Sequence i of the running-sum task of the DDP harness, as tests/support/running_sum.py defines
/// it (its one definition; running_sum.h is the C++ twin): features [T_i, 16] drawn at once by
/// `randn` from torch's CPU generator seeded with seed * 1000003 + i, target
/// y_t = (x_0[0] + ... + x_t[0]) / sqrt(t + 1), so that this trainer's data are the harness's.
fn running_sum(seed: u64, index: usize, steps: i64) -> (Tensor, Tensor) {
    tch::manual_seed((seed * 1_000_003 + index as u64) as i64);
    let features = Tensor::randn([steps, FEATURES], (Kind::Float, Device::Cpu));
    let scale = Tensor::arange_start(1, steps + 1, (Kind::Float, Device::Cpu)).sqrt();
    let target = features.select(1, 0).cumsum(0, Kind::Float) / scale;
    (features, target.unsqueeze(1))
}

/// The model either way: a GRU cell stepped here, or a TorchScript module.
enum Model {
    Gru(Gru),
    Script(CModule),
}

/// The GRU cell and linear head of `bload.nn.PackedGRU` (python/bload/nn.py), stepped in Rust.
struct Gru {
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
    head: nn::Linear,
}

impl Gru {
    /// Steps the cell over every block from `state` [blocks, HIDDEN], zeroing it where `reset`
    /// says -> (outputs [blocks, t_max, 1], the final state [blocks, HIDDEN]).
    fn run(
        &self,
        data: &Tensor,
        reset: &Tensor,
        mut state: Tensor,
    ) -> Result<(Tensor, Tensor), TchError> {
        let t_max = data.size()[1];
        let keep = reset.logical_not().to_kind(Kind::Float).unsqueeze(2);
        let mut states = Vec::with_capacity(t_max as usize);
        for step in 0..t_max {
            let input = data.select(1, step);
            state = input.f_gru_cell(
                &(state * keep.select(1, step)),
                &self.w_ih,
                &self.w_hh,
                Some(&self.b_ih),
                Some(&self.b_hh),
            )?;
            states.push(state.shallow_clone());
        }
        Ok((Tensor::stack(&states, 1).apply(&self.head), state))
    }
}

impl Model {
    /// A packed batch, every row from a zero state -> outputs [blocks, t_max, 1].
    fn forward(&self, packed: &PackedBatch) -> Result<Tensor, TchError> {
        match self {
            Model::Gru(gru) => {
                let blocks = packed.data.size()[0];
                let zeros = Tensor::zeros([blocks, HIDDEN], (Kind::Float, packed.data.device()));
                Ok(gru.run(&packed.data, &packed.reset, zeros)?.0)
            }
            Model::Script(module) => module.forward_ts(&[&packed.data, &packed.table]),
        }
    }

    /// A batch of lanes: each row goes on from its lane's `state` [blocks, hidden] where the
    /// batch's `carry` says, from zero elsewhere, and resets only where a sequence starts ->
    /// (outputs [blocks, t_max, 1], the final state).
    fn forward_lanes(
        &self,
        packed: &PackedBatch,
        state: &Tensor,
    ) -> Result<(Tensor, Tensor), TchError> {
        match self {
            Model::Gru(gru) => {
                let carry = packed.carry.to_kind(Kind::Float).unsqueeze(1);
                gru.run(&packed.data, &packed.reset, state * carry)
            }
            Model::Script(module) => {
                let inputs = [&packed.data, &packed.table, &packed.carry, state]
                    .map(|tensor| IValue::Tensor(tensor.shallow_clone()));
                module.method_is("forward_lanes", &inputs)?.try_into()
            }
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse()?;
    let mut lengths = read_lengths(&args.lengths)?;
    if args.sequences > 0 {
        lengths.truncate(args.sequences);
    }
    let mut options = Options::new(args.t_max);
    options.blocks_per_batch = args.blocks_per_batch;
    options.seed = args.seed;
    options.policy = args.policy;
    let planner = Planner::new(lengths.clone(), options)?;

    let vs = nn::VarStore::new(Device::Cpu);
    let mut hidden = HIDDEN; // the Rust GRU's, or the TorchScript model's (below)
    tch::manual_seed(args.seed as i64);
    let model = if args.model == "gru" {
        let root = vs.root();
        let bound = 1.0 / (HIDDEN as f64).sqrt();
        let uniform = nn::Init::Uniform {
            lo: -bound,
            up: bound,
        };
        Model::Gru(Gru {
            w_ih: root.var("w_ih", &[3 * HIDDEN, FEATURES], uniform),
            w_hh: root.var("w_hh", &[3 * HIDDEN, HIDDEN], uniform),
            b_ih: root.var("b_ih", &[3 * HIDDEN], uniform),
            b_hh: root.var("b_hh", &[3 * HIDDEN], uniform),
            head: nn::linear(&root / "head", HIDDEN, 1, Default::default()),
        })
    } else {
        let plugin = load_plugin(&args.library)?;
        println!(
            "loaded {} (torch {})",
            plugin.path.display(),
            plugin.torch_version
        );
        let mut module = CModule::load(&args.model)?;
        module.set_train();
        for (name, tensor) in module.named_parameters()? {
            // The recurrent state's width: a GRU cell's weight_hh is [3 hidden, hidden].
            if name.ends_with("weight_hh") {
                hidden = tensor.size()[1];
            }
            let trainable = tensor.requires_grad();
            let _ = vs.root().add(&name.replace('.', "_"), tensor, trainable);
        }
        Model::Script(module)
    };
    let mut optimizer = nn::Adam::default().build(&vs, args.lr)?;

    for epoch in 0..args.epochs {
        let plan = planner.plan(epoch)?;
        let total = plan.batches_per_rank();
        let (mut losses, mut frames, mut padding) = (Vec::new(), 0i64, 0i64);
        let start = Instant::now();
        // Lanes: each row's state at the end of the last batch, passed on detached.
        let blocks = i64::from(args.blocks_per_batch);
        let mut state = Tensor::zeros([blocks, hidden], (Kind::Float, Device::Cpu));
        for index in 0..total {
            let batch = plan.batch(0, index)?;
            let packed = pack_batch(&batch, &PackOptions::default(), |i| {
                Ok::<_, bload::tch::Error>(running_sum(args.seed, i, i64::from(lengths[i])))
            })?;
            let output = if batch.carries_state() {
                let (output, last) = model.forward_lanes(&packed, &state)?;
                state = last.detach();
                output
            } else {
                model.forward(&packed)?
            };
            let errors = (output - &packed.target)
                .square()
                .sum_dim_intlist(-1, false, Kind::Float);
            // The mean over valid steps; 0, not NaN, for a batch of padding alone (lanes' last
            // batches can be mostly padding).
            let valid = packed.valid.sum(Kind::Int64).int64_value(&[]);
            let loss = errors.masked_select(&packed.valid).sum(Kind::Float) / valid.max(1) as f64;
            optimizer.backward_step(&loss);
            frames += valid;
            padding += packed.valid.numel() as i64 - valid;
            losses.push(loss.double_value(&[]));
            if (index + 1) * 10 / total != index * 10 / total {
                let seconds = start.elapsed().as_secs_f64();
                println!(
                    "batch {}/{}  loss {:.4}  {:.1} steps/s  {:.0} frames/s",
                    index + 1,
                    total,
                    losses[index],
                    (index + 1) as f64 / seconds,
                    frames as f64 / seconds
                );
            }
        }
        let tenth = (losses.len() / 10).max(1);
        let mean = |part: &[f64]| part.iter().sum::<f64>() / part.len() as f64;
        println!(
            "epoch {epoch}: {}, {:.2} s, {total} batches, padding {:.2}% of steps, loss {:.4} -> {:.4}",
            args.policy,
            start.elapsed().as_secs_f64(),
            100.0 * padding as f64 / (frames + padding) as f64,
            mean(&losses[..tenth]),
            mean(&losses[losses.len() - tenth..])
        );
    }
    Ok(())
}
