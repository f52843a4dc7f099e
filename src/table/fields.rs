//! The packed batch, declared once: every field's name, dtype, shape and meaning.
//!
//! C++'s `bload::PackedBatch`, Python's `bload.PackedBatch` and `bload::tch::PackedBatch` are
//! made from this list or checked against it (the plugin refuses to load, and the tch feature
//! refuses to compile, when theirs differ), so a field is added here and nowhere else by name.
//! The fields come in two kinds: those a loader reads or plans (the data, the targets and the
//! block table), and those written from the block table alone by [`BlockTable::write_batch`],
//! in [`BatchField::FROM_TABLE`] order: the order of `torch.ops.bload.batch_tables`' outputs.
//!
//! [`BlockTable::write_batch`]: super::BlockTable::write_batch

use super::buffers::{Buffers, FieldBuffer, FieldDtype, FieldElement};
use crate::error::Result;

/// Declares the fields once, each on one entry: its variant, name, element type, shape and
/// meaning. From the entries come [`BatchField`], its lists ([`BatchField::ALL`],
/// [`BatchField::FROM_TABLE`]) and accessors, and the writer's named buffers
/// ([`BatchTablesMut`], with its list form for front ends that allocate by looping over the
/// declaration), so a field written from the table is one entry here and its writing in
/// `steps.rs`. The three groups are the kinds of field: loaded or planned, written from the
/// table (in the order of `torch.ops.bload.batch_tables`' outputs), and host integers.
macro_rules! batch_fields {
    (
        loaded {
            $($loaded:ident $loaded_name:ident:
                $loaded_dtype:ident, $loaded_shape:ident, $loaded_doc:expr;)*
        }
        from_table {
            $($table:ident $table_name:ident: $element:ty, $table_shape:ident, $table_doc:expr;)*
        }
        host {
            $($host:ident $host_name:ident: $host_dtype:ident, $host_shape:ident, $host_doc:expr;)*
        }
    ) => {
        /// A field of a packed batch.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum BatchField {
            $($loaded,)* $($table,)* $($host,)*
        }

        impl BatchField {
            pub const ALL: [BatchField; [$($loaded_doc,)* $($table_doc,)* $($host_doc,)*].len()] =
                [$(BatchField::$loaded,)* $(BatchField::$table,)* $(BatchField::$host,)*];

            /// The fields written from the block table, in the order `write_batch` and the
            /// `batch_tables` operator give them (tensors; host integers are not among them).
            pub const FROM_TABLE: [BatchField; [$($table_doc,)*].len()] =
                [$(BatchField::$table,)*];

            /// The field's name, the same in C++, Python and Rust.
            pub const fn name(self) -> &'static str {
                match self {
                    $(BatchField::$loaded => stringify!($loaded_name),)*
                    $(BatchField::$table => stringify!($table_name),)*
                    $(BatchField::$host => stringify!($host_name),)*
                }
            }

            pub const fn dtype(self) -> FieldDtype {
                match self {
                    $(BatchField::$loaded => FieldDtype::$loaded_dtype,)*
                    $(BatchField::$table => <$element as FieldElement>::DTYPE,)*
                    $(BatchField::$host => FieldDtype::$host_dtype,)*
                }
            }

            pub const fn shape(self) -> FieldShape {
                match self {
                    $(BatchField::$loaded => FieldShape::$loaded_shape,)*
                    $(BatchField::$table => FieldShape::$table_shape,)*
                    $(BatchField::$host => FieldShape::$host_shape,)*
                }
            }

            /// Whether the field is a tensor written from the block table by `write_batch` (else
            /// a loader reads or plans it, or it is a host integer: see [`FieldShape::HostInt`]).
            pub const fn from_table(self) -> bool {
                matches!(self, $(BatchField::$table)|*)
            }

            /// What the field holds, for the docs of every language's batch.
            pub const fn doc(self) -> &'static str {
                match self {
                    $(BatchField::$loaded => $loaded_doc,)*
                    $(BatchField::$table => $table_doc,)*
                    $(BatchField::$host => $host_doc,)*
                }
            }
        }

        /// The buffers [`BlockTable::write_batch`](super::BlockTable::write_batch) writes, one
        /// per field of [`BatchField::FROM_TABLE`], each of the size its [`FieldShape`] gives.
        pub struct BatchTablesMut<'o> {
            $(pub $table_name: &'o mut [$element],)*
        }

        impl<'o> BatchTablesMut<'o> {
            /// The buffers as a list in [`BatchField::FROM_TABLE`] order.
            pub fn into_buffers(self) -> Vec<FieldBuffer<'o>> {
                vec![$(FieldElement::buffer(self.$table_name),)*]
            }

            /// The named buffers of a list in [`BatchField::FROM_TABLE`] order, each checked to
            /// have its field's declared dtype (the writer checks their sizes).
            pub fn from_buffers(buffers: Vec<FieldBuffer<'o>>) -> Result<Self> {
                let mut buffers = Buffers::of(buffers, BatchField::FROM_TABLE.len())?;
                Ok(BatchTablesMut {
                    $($table_name: buffers.take(BatchField::$table.name())?,)*
                })
            }
        }
    };
}

batch_fields! {
    loaded {
        Data data: Loaded, Steps, "the sequences' steps packed; padding steps hold data_padding";
        Target target: Loaded, Steps, "the targets packed; padding steps hold target_padding";
        Table table: Int64, TableRows,
            "the block table: one row per piece (block, block_offset, length, sequence, \
             offset, sequence_length)";
    }
    from_table {
        Reset reset: bool, StepTable,
            "true at the first step of every piece, where recurrent state starts from zero \
             (with carried state, lanes, only where a sequence starts)";
        Valid valid: bool, StepTable, "true on real steps, false on padding";
        Ends ends: bool, StepTable, "true at the last step of every sequence";
        Carry carry: bool, Blocks,
            "true where the row's first step goes on from the state its lane had at the end \
             of the previous batch (lanes); keep that state, zero the others";
        Lanes lanes: i64, Blocks, "the lane of every row: rank * blocks_per_batch + row";
        SegmentIds segment_ids: i32, StepTable, "the piece's index inside its block, -1 on padding";
        PositionIds position_ids: i64, StepTable,
            "the step's index in its sequence (positions \"sequence\", the default) or in its \
             piece (positions \"piece\"), 0 on padding";
        CuSeqlens cu_seqlens: i32, PiecesPlusOne,
            "prefix sums of the pieces' lengths: varlen offsets";
        Indices indices: i64, Pieces, "the dataset index of every piece";
        StateIn state_in: i64, Pieces,
            "for every piece, in cu_seqlens order, the row whose lane's saved state seeds it \
             (lanes: the piece continues its sequence from the previous batch), -1 where it \
             starts from zeros";
        StateOut state_out: i64, Blocks,
            "for every row, the piece whose final state its lane keeps for the next batch \
             (lanes: the piece is cut at the row's end and its sequence goes on there), -1 \
             where the lane's saved state is not read again";
        DocumentIds document_ids: i32, StepTable,
            "the step's document: pieces and padding runs numbered 0, 1, ... in order over \
             the flattened [blocks * t_max] layout (each piece, and each run of padding, an id \
             of its own; mamba's seq_idx for the padded layout)";
        CuSeqlensPadded cu_seqlens_padded: i32, Segments,
            "offsets of the documents over the flattened [blocks * t_max] layout, padding runs \
             included (varlen kernels see blocks * t_max tokens); the entries after the last \
             document repeat blocks * t_max";
    }
    host {
        MaxSeqlen max_seqlen: Int64, HostInt, "the longest piece's steps, 0 for a table of no row";
    }
}

/// A field's shape, in the batch's `blocks`, `t_max` and `pieces` (rows of its table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldShape {
    /// `[blocks, t_max, ...]`: per step, with the sequences' trailing shape.
    Steps,
    /// `[blocks, t_max]`: one value per step.
    StepTable,
    /// `[blocks]`: one value per row.
    Blocks,
    /// `[pieces]`: one value per table row.
    Pieces,
    /// `[pieces + 1]`: prefix sums over the table's rows.
    PiecesPlusOne,
    /// `[pieces, 6]`: the block table itself.
    TableRows,
    /// `[2 * pieces + blocks + 1]`: offsets of the batch's segments (pieces and padding runs),
    /// as many entries as a table of `pieces` rows can need.
    Segments,
    /// One integer on the host (a Python `int`, a C++ `int64_t`), not a tensor: computed from
    /// the table when the batch is made and carried with it, so no kernel reads a device tensor.
    HostInt,
}

impl FieldShape {
    /// The shape as the docs write it.
    pub const fn rule(self) -> &'static str {
        match self {
            FieldShape::Steps => "[blocks, t_max, ...]",
            FieldShape::StepTable => "[blocks, t_max]",
            FieldShape::Blocks => "[blocks]",
            FieldShape::Pieces => "[pieces]",
            FieldShape::PiecesPlusOne => "[pieces + 1]",
            FieldShape::TableRows => "[pieces, 6]",
            FieldShape::Segments => "[2 * pieces + blocks + 1]",
            FieldShape::HostInt => "int",
        }
    }

    /// The dimensions of a field of a batch of `blocks` blocks of `t_max` steps whose table has
    /// `pieces` rows (for the loaded fields, without the sequences' trailing shape).
    pub fn dims(self, blocks: usize, t_max: usize, pieces: usize) -> Vec<usize> {
        self.dim_rules()
            .iter()
            .map(|rule| rule.of(blocks, t_max, pieces))
            .collect()
    }

    /// Each dimension as a sum of the batch's sizes: what a front end that allocates a field
    /// (C++'s operator, for real and symbolic sizes alike) reads instead of writing the rule
    /// down again.
    pub const fn dim_rules(self) -> &'static [DimRule] {
        const BLOCKS: DimRule = DimRule::new(1, 0, 0, 0);
        const T_MAX: DimRule = DimRule::new(0, 1, 0, 0);
        const PIECES: DimRule = DimRule::new(0, 0, 1, 0);
        const PIECES_PLUS_ONE: DimRule = DimRule::new(0, 0, 1, 1);
        const COLUMNS: DimRule = DimRule::new(0, 0, 0, super::Column::COUNT);
        const SEGMENTS: DimRule = DimRule::new(1, 0, 2, 1);
        match self {
            FieldShape::Steps | FieldShape::StepTable => &[BLOCKS, T_MAX],
            FieldShape::Blocks => &[BLOCKS],
            FieldShape::Pieces => &[PIECES],
            FieldShape::PiecesPlusOne => &[PIECES_PLUS_ONE],
            FieldShape::TableRows => &[PIECES, COLUMNS],
            // super::padded_segments_bound(blocks, pieces); a test checks the two agree.
            FieldShape::Segments => &[SEGMENTS],
            FieldShape::HostInt => &[],
        }
    }
}

/// One dimension of a field: `blocks * blocks + t_max * t_max + pieces * pieces + constant`,
/// in the batch's number of blocks, steps per block and table rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DimRule {
    pub blocks: usize,
    pub t_max: usize,
    pub pieces: usize,
    pub constant: usize,
}

impl DimRule {
    pub const fn new(blocks: usize, t_max: usize, pieces: usize, constant: usize) -> Self {
        DimRule {
            blocks,
            t_max,
            pieces,
            constant,
        }
    }

    /// The dimension of a batch of these sizes.
    pub const fn of(self, blocks: usize, t_max: usize, pieces: usize) -> usize {
        self.blocks * blocks + self.t_max * t_max + self.pieces * pieces + self.constant
    }
}

/// Whether two lists of names are equal, at compile time: how `bload::tch::PackedBatch` checks
/// its fields against [`BatchField::ALL`] when it is built.
pub const fn same_names(a: &[&str], b: &[&str]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        let (x, y) = (a[i].as_bytes(), b[i].as_bytes());
        if x.len() != y.len() {
            return false;
        }
        let mut j = 0;
        while j < x.len() {
            if x[j] != y[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// The names of [`BatchField::ALL`], in order, usable in constants.
pub const BATCH_FIELD_NAMES: [&str; BatchField::ALL.len()] = {
    let mut names = [""; BatchField::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = BatchField::ALL[i].name();
        i += 1;
    }
    names
};
