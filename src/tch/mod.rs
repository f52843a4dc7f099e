//! Packed batches as `tch` tensors, for Rust trainers (cargo feature `tch`), and the loader that
//! brings `libbload.so`'s `torch.ops.bload.*` into the process so that TorchScript models calling
//! them load with `tch::CModule`.
//!
//! [`pack_batch`] gives, for a planned batch, the tensors the C++ `bload::BlockDataset` gives
//! (`bload::PackedBatch`): the same shapes, dtypes and values, bit for bit (tested against the
//! plugin's operators in `tests/tch_pack.rs`).
//!
//! ```no_run
//! use bload::{Options, Planner};
//! use tch::{Kind, Tensor};
//!
//! let lengths = vec![5u32, 3, 8, 2];
//! let planner = Planner::new(lengths.clone(), Options::new(8))?;
//! let plan = planner.plan(0)?;
//! let data: Vec<Tensor> = lengths.iter().map(|&n| Tensor::randn([n as i64, 4], (Kind::Float, tch::Device::Cpu))).collect();
//! let target: Vec<Tensor> = lengths.iter().map(|&n| Tensor::zeros([n as i64], (Kind::Int64, tch::Device::Cpu))).collect();
//! let batch = bload::tch::pack_batch_from(&plan.batch(0, 0)?, &data, &target, &bload::tch::PackOptions::default())?;
//! assert_eq!(batch.data.size(), [1, 8, 4]);
//! # Ok::<(), bload::tch::Error>(())
//! ```

use crate::{Batch, Column, StepTables, TableRow};
use ::tch::{Device, TchError, Tensor};
use std::fmt;
use std::path::PathBuf;

/// The torch release this build's `tch` binds (tch 0.26 is built for torch 2.13): a
/// `libbload.so` built against another torch cannot share the process with it.
pub const TORCH_VERSION: &str = "2.13";

/// What went wrong packing a batch or loading the plugin.
#[derive(Debug)]
pub enum Error {
    /// An argument or a loaded sequence that does not fit the plan.
    Invalid(crate::Error),
    /// The closure that loads sequences failed for `sequence`.
    Load {
        sequence: usize,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// libtorch refused an operation.
    Torch(TchError),
    /// `libbload.so` could not be loaded.
    Plugin { path: PathBuf, reason: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(error) => error.fmt(f),
            Error::Load { sequence, source } => write!(f, "loading sequence {sequence}: {source}"),
            Error::Torch(error) => write!(f, "libtorch: {error}"),
            Error::Plugin { path, reason } => write!(f, "{}: {reason}", path.display()),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::Error> for Error {
    fn from(error: crate::Error) -> Self {
        Error::Invalid(error)
    }
}

impl From<TchError> for Error {
    fn from(error: TchError) -> Self {
        Error::Torch(error)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

mod plugin;
pub use plugin::{load_plugin, Plugin};

/// Declares [`PackedBatch`] and the list of its fields' names from one list, which must be the
/// core's declaration of the batch ([`crate::BatchField`]): checked when this crate compiles.
macro_rules! packed_batch {
    ($($(#[$doc:meta])* $name:ident: $kind:ty,)* ; $($(#[$more_doc:meta])* $more:ident: $more_kind:ty,)*) => {
        /// One packed batch of one rank, as `bload::PackedBatch` in C++ and `bload.PackedBatch`
        /// in Python: the core's fields ([`crate::BatchField`]), in its order, then what the
        /// plan says of the batch beyond its table. Per-step tensors are `[blocks, t_max, ...]`.
        #[derive(Debug)]
        pub struct PackedBatch {
            $($(#[$doc])* pub $name: $kind,)*
            $($(#[$more_doc])* pub $more: $more_kind,)*
        }

        impl PackedBatch {
            /// The fields' names, in declaration order.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($name)),*];
        }
    };
}

packed_batch! {
    /// Padding steps hold [`PackOptions::data_padding`].
    data: Tensor,
    /// Padding steps hold [`PackOptions::target_padding`].
    target: Tensor,
    /// Int64 `[pieces, 6]`: the block table (columns [`crate::Column`]), on the host.
    table: Tensor,
    /// Bool: the first step of every piece, where recurrent state resets (with the lanes
    /// policy, only where a sequence starts).
    reset: Tensor,
    /// Bool: real steps.
    valid: Tensor,
    /// Bool: the last step of every sequence.
    ends: Tensor,
    /// Bool `[blocks]`: the row goes on from the state it carried from the previous batch
    /// (lanes); all false for packed batches.
    carry: Tensor,
    /// Int64 `[blocks]`: the lane of every row (`rank * blocks_per_batch + row`).
    lanes: Tensor,
    /// Int32: the piece's index inside its block, -1 on padding.
    segment_ids: Tensor,
    /// Int64: the step's index inside its sequence (or its piece, with
    /// [`PackOptions::positions`] [`Positions::Piece`](crate::Positions::Piece)), 0 on padding.
    position_ids: Tensor,
    /// Int32 `[pieces + 1]`: flash-attention's varlen offsets over the valid steps.
    cu_seqlens: Tensor,
    /// Int64 `[pieces]`: the dataset index of every piece.
    indices: Tensor,
    /// Int64 `[pieces]`: the row whose lane state seeds every piece (`cu_seqlens` order), -1
    /// for zeros; all -1 for packed batches.
    state_in: Tensor,
    /// Int64 `[blocks]`: the piece whose final state every row's lane keeps for the next batch,
    /// -1 where the lane's state is not read again; all -1 for packed batches.
    state_out: Tensor,
    /// Int32: the step's document, pieces and padding runs numbered in flattened order.
    document_ids: Tensor,
    /// Int32 `[2 * pieces + blocks + 1]`: the documents' offsets over the flattened layout,
    /// padding runs included, then `blocks * t_max` repeated.
    cu_seqlens_padded: Tensor,
    /// The longest piece's steps, on the host: varlen kernels' `max_seqlen`.
    max_seqlen: i64,
    ;
    /// The global batch (every rank's batch of this index): its real steps (`global.valid`,
    /// Python's `global_valid`), pieces, and the loss scales that make DDP's averaged gradients
    /// those of the token mean over it (`loss_scale`, `shifted_loss_scale`).
    global: crate::GlobalBatch,
}

// A field added to the core's batch, or renamed, fails this build until it is here too.
const _: () = assert!(
    crate::same_names(PackedBatch::FIELDS, &crate::BATCH_FIELD_NAMES),
    "bload::tch::PackedBatch's fields differ from the core's batch (src/table/fields.rs)"
);

/// Padding values and where the batch goes, as in `bload::Options` in C++.
#[derive(Debug, Clone, Copy)]
pub struct PackOptions {
    pub data_padding: f64,
    pub target_padding: f64,
    /// Device of every tensor of the batch.
    pub device: Device,
    /// What `position_ids` count from, as C++'s `Options::positions`.
    pub positions: crate::Positions,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            data_padding: 0.0,
            target_padding: 0.0,
            device: Device::Cpu,
            positions: crate::Positions::Sequence,
        }
    }
}

/// Packs `batch` from sequences held in memory: `data[i]` and `target[i]` are sequence i's
/// per-step tensors `[T_i, ...]`, indexed like the lengths the plan was made from.
pub fn pack_batch_from(
    batch: &Batch<'_>,
    data: &[Tensor],
    target: &[Tensor],
    options: &PackOptions,
) -> Result<PackedBatch> {
    for (argument, tensors) in [("data", data), ("target", target)] {
        if tensors.len() != batch.lengths().len() {
            return Err(crate::Error::invalid(
                argument,
                format!("{} sequences", tensors.len()),
                format!("{} (one per length planned)", batch.lengths().len()),
            )
            .into());
        }
    }
    pack_batch(batch, options, |sequence| {
        Ok::<_, Error>((
            data[sequence].shallow_clone(),
            target[sequence].shallow_clone(),
        ))
    })
}

/// Packs `batch`, calling `load(i)` for the `(data, target)` of each sequence i it holds, in
/// table order (a split sequence is loaded once per piece).
pub fn pack_batch<E>(
    batch: &Batch<'_>,
    options: &PackOptions,
    mut load: impl FnMut(usize) -> Result<(Tensor, Tensor), E>,
) -> Result<PackedBatch>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    pack_rows(batch, options, Read::Whole, |sequence, _, _| load(sequence))
}

/// Packs `batch` from its pieces' steps alone: `load(i, offset, length)` gives the
/// `(data, target)` of steps `[offset, offset + length)` of sequence i, once per table row. A
/// lanes batch holds a window of each long sequence: this reads the window, not the sequence.
/// (A batch of empty blocks asks for `(0, 0, 0)`, for the trailing shape and kind.)
pub fn pack_batch_ranges<E>(
    batch: &Batch<'_>,
    options: &PackOptions,
    load: impl FnMut(usize, i64, i64) -> Result<(Tensor, Tensor), E>,
) -> Result<PackedBatch>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    pack_rows(batch, options, Read::Range, load)
}

/// What a loader returns for a table row: its piece's whole sequence, or the piece alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Whole,
    Range,
}

fn pack_rows<E>(
    batch: &Batch<'_>,
    options: &PackOptions,
    read: Read,
    mut load: impl FnMut(usize, i64, i64) -> Result<(Tensor, Tensor), E>,
) -> Result<PackedBatch>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let rows = batch.table();
    let tables = batch.tables_with(options.positions);
    let mut loaded = |sequence: usize, offset: i64, length: i64| {
        load(sequence, offset, length).map_err(|source| Error::Load {
            sequence,
            source: source.into(),
        })
    };
    let (data, target) = if rows.is_empty() {
        // A batch of empty blocks (left by rounding): sequence 0 gives the shape and kind.
        let (data, target) = loaded(0, 0, 0)?;
        let shape = |t: &Tensor| packed_shape(t, &tables);
        (
            Tensor::f_full(
                shape(&data),
                options.data_padding,
                (data.kind(), options.device),
            )?,
            Tensor::f_full(
                shape(&target),
                options.target_padding,
                (target.kind(), options.device),
            )?,
        )
    } else {
        let mut data = Vec::with_capacity(rows.len());
        let mut target = Vec::with_capacity(rows.len());
        for row in &rows {
            let (offset, length) = (Column::Offset.of(row), Column::Length.of(row));
            let (d, t) = loaded(Column::Sequence.of(row) as usize, offset, length)?;
            data.push(d);
            target.push(t);
        }
        (
            pack(
                &rows,
                read,
                &data,
                "data",
                &tables,
                options.data_padding,
                options.device,
            )?,
            pack(
                &rows,
                read,
                &target,
                "target",
                &tables,
                options.target_padding,
                options.device,
            )?,
        )
    };
    // Built on the host from the plan's tables, then moved (an unavailable device is an error).
    let steps = [tables.blocks as i64, tables.t_max as i64];
    let per_step = |values: Tensor| values.f_view(steps)?.f_to(options.device);
    let cells: Vec<i64> = rows.iter().flatten().copied().collect();
    Ok(PackedBatch {
        data,
        target,
        reset: per_step(Tensor::from_slice(&tables.reset))?,
        valid: per_step(Tensor::from_slice(&tables.valid))?,
        ends: per_step(Tensor::from_slice(&tables.ends))?,
        carry: Tensor::from_slice(&tables.carry).f_to(options.device)?,
        lanes: Tensor::from_slice(&tables.lanes).f_to(options.device)?,
        segment_ids: per_step(Tensor::from_slice(&tables.segment_ids))?,
        position_ids: per_step(Tensor::from_slice(&tables.position_ids))?,
        cu_seqlens: Tensor::from_slice(&tables.cu_seqlens).f_to(options.device)?,
        indices: Tensor::from_slice(&tables.indices).f_to(options.device)?,
        state_in: Tensor::from_slice(&tables.state_in).f_to(options.device)?,
        state_out: Tensor::from_slice(&tables.state_out).f_to(options.device)?,
        document_ids: per_step(Tensor::from_slice(&tables.document_ids))?,
        cu_seqlens_padded: Tensor::from_slice(&tables.cu_seqlens_padded).f_to(options.device)?,
        max_seqlen: tables.max_seqlen,
        global: batch.global(),
        // The table stays on the host, as in C++: the operators read it there.
        table: Tensor::from_slice(&cells).f_view([rows.len() as i64, Column::COUNT as i64])?,
    })
}

fn packed_shape(like: &Tensor, tables: &StepTables) -> Vec<i64> {
    let mut shape = vec![tables.blocks as i64, tables.t_max as i64];
    shape.extend_from_slice(like.size().get(1..).unwrap_or_default());
    shape
}

/// `[blocks, t_max, ...]` from the rows' sequences (or pieces, as `read` says), each piece's
/// steps copied to its place and every other step `padding`. Every sequence must have its planned
/// length (every piece its own), and the first one's trailing shape and kind.
fn pack(
    rows: &[TableRow],
    read: Read,
    sequences: &[Tensor],
    argument: &str,
    tables: &StepTables,
    padding: f64,
    device: Device,
) -> Result<Tensor> {
    let first = &sequences[0];
    if first.dim() == 0 {
        return Err(invalid(
            argument,
            Column::Sequence.of(&rows[0]),
            "a 0-d tensor",
            "a tensor [steps, ...]",
        ));
    }
    let out = Tensor::f_full(packed_shape(first, tables), padding, (first.kind(), device))?;
    for (row, sequence) in rows.iter().zip(sequences) {
        let index = Column::Sequence.of(row);
        let sequence_length = Column::SequenceLength.of(row);
        let length = Column::Length.of(row);
        let (steps_expected, from, expected) = match read {
            Read::Whole => (
                sequence_length,
                Column::Offset.of(row),
                "its planned length",
            ),
            Read::Range => (length, 0, "the range asked for"),
        };
        if sequence.dim() == 0 || sequence.size()[0] != steps_expected {
            let steps = sequence.size().first().copied().unwrap_or(0);
            let expected = format!("{steps_expected} steps ({expected})");
            return Err(invalid(argument, index, format!("{steps} steps"), expected));
        }
        if sequence.size()[1..] != first.size()[1..] || sequence.kind() != first.kind() {
            let got = format!("{:?} {:?}", sequence.size(), sequence.kind());
            let expected = format!(
                "[{steps_expected}, {:?}] {:?} like sequence {} (the first piece's)",
                &first.size()[1..],
                first.kind(),
                Column::Sequence.of(&rows[0])
            );
            return Err(invalid(argument, index, got, expected));
        }
        let block = out.f_get(Column::Block.of(row))?;
        let mut place = block.f_narrow(0, Column::BlockOffset.of(row), length)?;
        place.f_copy_(&sequence.f_narrow(0, from, length)?)?;
    }
    Ok(out)
}

fn invalid(
    argument: &str,
    sequence: i64,
    value: impl fmt::Display,
    expected: impl Into<String>,
) -> Error {
    crate::Error::invalid(
        format!("{argument} of sequence {sequence}"),
        value,
        expected,
    )
    .into()
}
