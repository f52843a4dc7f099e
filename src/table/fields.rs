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

/// A field of a packed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchField {
    Data,
    Target,
    Table,
    Reset,
    Valid,
    Ends,
    Carry,
    Lanes,
    SegmentIds,
    PositionIds,
    CuSeqlens,
    Indices,
    StateIn,
    StateOut,
    DocumentIds,
    CuSeqlensPadded,
    MaxSeqlen,
}

/// A field's element type: the dataset's own for the data and targets, else a fixed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldDtype {
    /// The dtype the dataset's sequences have.
    Loaded,
    Bool,
    Int32,
    Int64,
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

impl BatchField {
    pub const ALL: [BatchField; 17] = [
        BatchField::Data,
        BatchField::Target,
        BatchField::Table,
        BatchField::Reset,
        BatchField::Valid,
        BatchField::Ends,
        BatchField::Carry,
        BatchField::Lanes,
        BatchField::SegmentIds,
        BatchField::PositionIds,
        BatchField::CuSeqlens,
        BatchField::Indices,
        BatchField::StateIn,
        BatchField::StateOut,
        BatchField::DocumentIds,
        BatchField::CuSeqlensPadded,
        BatchField::MaxSeqlen,
    ];

    /// The fields written from the block table, in the order `write_batch` and the
    /// `batch_tables` operator give them (tensors; `max_seqlen`, a host integer, is not one).
    pub const FROM_TABLE: [BatchField; 13] = [
        BatchField::Reset,
        BatchField::Valid,
        BatchField::Ends,
        BatchField::Carry,
        BatchField::Lanes,
        BatchField::SegmentIds,
        BatchField::PositionIds,
        BatchField::CuSeqlens,
        BatchField::Indices,
        BatchField::StateIn,
        BatchField::StateOut,
        BatchField::DocumentIds,
        BatchField::CuSeqlensPadded,
    ];

    /// The field's name, the same in C++, Python and Rust.
    pub const fn name(self) -> &'static str {
        match self {
            BatchField::Data => "data",
            BatchField::Target => "target",
            BatchField::Table => "table",
            BatchField::Reset => "reset",
            BatchField::Valid => "valid",
            BatchField::Ends => "ends",
            BatchField::Carry => "carry",
            BatchField::Lanes => "lanes",
            BatchField::SegmentIds => "segment_ids",
            BatchField::PositionIds => "position_ids",
            BatchField::CuSeqlens => "cu_seqlens",
            BatchField::Indices => "indices",
            BatchField::StateIn => "state_in",
            BatchField::StateOut => "state_out",
            BatchField::DocumentIds => "document_ids",
            BatchField::CuSeqlensPadded => "cu_seqlens_padded",
            BatchField::MaxSeqlen => "max_seqlen",
        }
    }

    pub const fn dtype(self) -> FieldDtype {
        match self {
            BatchField::Data | BatchField::Target => FieldDtype::Loaded,
            BatchField::Reset | BatchField::Valid | BatchField::Ends | BatchField::Carry => {
                FieldDtype::Bool
            }
            BatchField::SegmentIds
            | BatchField::CuSeqlens
            | BatchField::DocumentIds
            | BatchField::CuSeqlensPadded => FieldDtype::Int32,
            BatchField::MaxSeqlen => FieldDtype::Int64,
            BatchField::Table
            | BatchField::Lanes
            | BatchField::PositionIds
            | BatchField::Indices => FieldDtype::Int64,
            BatchField::StateIn | BatchField::StateOut => FieldDtype::Int64,
        }
    }

    pub const fn shape(self) -> FieldShape {
        match self {
            BatchField::Data | BatchField::Target => FieldShape::Steps,
            BatchField::Table => FieldShape::TableRows,
            BatchField::Reset
            | BatchField::Valid
            | BatchField::Ends
            | BatchField::SegmentIds
            | BatchField::PositionIds
            | BatchField::DocumentIds => FieldShape::StepTable,
            BatchField::Carry | BatchField::Lanes => FieldShape::Blocks,
            BatchField::CuSeqlens => FieldShape::PiecesPlusOne,
            BatchField::Indices => FieldShape::Pieces,
            BatchField::StateIn => FieldShape::Pieces,
            BatchField::StateOut => FieldShape::Blocks,
            BatchField::CuSeqlensPadded => FieldShape::Segments,
            BatchField::MaxSeqlen => FieldShape::HostInt,
        }
    }

    /// Whether the field is a tensor written from the block table by `write_batch` (else a
    /// loader reads or plans it, or it is a host integer: see [`FieldShape::HostInt`]).
    pub const fn from_table(self) -> bool {
        !matches!(
            self,
            BatchField::Data | BatchField::Target | BatchField::Table | BatchField::MaxSeqlen
        )
    }

    /// What the field holds, for the docs of every language's batch.
    pub const fn doc(self) -> &'static str {
        match self {
            BatchField::Data => "the sequences' steps packed; padding steps hold data_padding",
            BatchField::Target => "the targets packed; padding steps hold target_padding",
            BatchField::Table => {
                "the block table: one row per piece (block, block_offset, length, sequence, \
                 offset, sequence_length)"
            }
            BatchField::Reset => {
                "true at the first step of every piece, where recurrent state starts from zero \
                 (with carried state, lanes, only where a sequence starts)"
            }
            BatchField::Valid => "true on real steps, false on padding",
            BatchField::Ends => "true at the last step of every sequence",
            BatchField::Carry => {
                "true where the row's first step goes on from the state its lane had at the end \
                 of the previous batch (lanes); keep that state, zero the others"
            }
            BatchField::Lanes => "the lane of every row: rank * blocks_per_batch + row",
            BatchField::SegmentIds => "the piece's index inside its block, -1 on padding",
            BatchField::PositionIds => {
                "the step's index in its sequence (positions \"sequence\", the default) or in its \
                 piece (positions \"piece\"), 0 on padding"
            }
            BatchField::CuSeqlens => "prefix sums of the pieces' lengths: varlen offsets",
            BatchField::Indices => "the dataset index of every piece",
            BatchField::StateIn => {
                "for every piece, in cu_seqlens order, the row whose lane's saved state seeds it \
                 (lanes: the piece continues its sequence from the previous batch), -1 where it \
                 starts from zeros"
            }
            BatchField::StateOut => {
                "for every row, the piece whose final state its lane keeps for the next batch \
                 (lanes: the piece is cut at the row's end and its sequence goes on there), -1 \
                 where the lane's saved state is not read again"
            }
            BatchField::DocumentIds => {
                "the step's document: pieces and padding runs numbered 0, 1, ... in order over \
                 the flattened [blocks * t_max] layout (each piece, and each run of padding, an id \
                 of its own; mamba's seq_idx for the padded layout)"
            }
            BatchField::CuSeqlensPadded => {
                "offsets of the documents over the flattened [blocks * t_max] layout, padding runs \
                 included (varlen kernels see blocks * t_max tokens); the entries after the last \
                 document repeat blocks * t_max"
            }
            BatchField::MaxSeqlen => "the longest piece's steps, 0 for a table of no row",
        }
    }
}

impl FieldDtype {
    /// The dtype as torch spells it (`"loaded"` for the dataset's own).
    pub const fn name(self) -> &'static str {
        match self {
            FieldDtype::Loaded => "loaded",
            FieldDtype::Bool => "bool",
            FieldDtype::Int32 => "int32",
            FieldDtype::Int64 => "int64",
        }
    }
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
