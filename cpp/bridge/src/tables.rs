//! The bridge's half of block tables and packed batches: the table's columns and checks, the
//! per-table writers behind the per-table operators, every table of a batch in one call, and the
//! core's one declaration of the batch's fields. Declared in the `#[cxx::bridge]` of `lib.rs`.
//! Each writer checks the table as a batch `[blocks, t_max]`'s, then writes into the caller's
//! buffer (a tensor's memory).

use super::ffi::BatchFieldInfo;
use super::guard::{guarded, BridgeError};
use bload::{BatchField, BatchTablesMut, BlockTable, Column, KvBlocksMut, Policy, Positions};

pub(crate) fn batch_fields() -> Vec<BatchFieldInfo> {
    BatchField::ALL
        .iter()
        .map(|field| BatchFieldInfo {
            name: field.name().into(),
            dtype: field.dtype().name().into(),
            shape: field.shape().rule().into(),
            from_table: field.from_table(),
            doc: field.doc().into(),
        })
        .collect()
}

pub(crate) fn policy_names() -> Vec<String> {
    Policy::ALL
        .iter()
        .map(|policy| policy.name().into())
        .collect()
}

/// Every table of a batch ([`BatchField::FROM_TABLE`], one buffer each), from one check of the
/// table.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_batch_tables(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    carry: bool,
    first_lane: i64,
    positions: &str,
    reset: &mut [bool],
    valid: &mut [bool],
    ends: &mut [bool],
    carried: &mut [bool],
    lanes: &mut [i64],
    segment_ids: &mut [i32],
    position_ids: &mut [i64],
    cu_seqlens: &mut [i32],
    indices: &mut [i64],
    state_in: &mut [i64],
    state_out: &mut [i64],
    document_ids: &mut [i32],
    cu_seqlens_padded: &mut [i32],
) -> Result<(), BridgeError> {
    guarded("write_batch_tables", || {
        let positions = Positions::from_name(positions)?;
        let out = BatchTablesMut {
            reset,
            valid,
            ends,
            carry: carried,
            lanes,
            segment_ids,
            position_ids,
            cu_seqlens,
            indices,
            state_in,
            state_out,
            document_ids,
            cu_seqlens_padded,
        };
        BlockTable::with_carry(table, blocks, t_max, carry)?
            .with_positions(positions)
            .write_batch(first_lane, out)
    })
}

pub(crate) fn max_seqlen(table: &[i64], blocks: i64, t_max: i64) -> Result<i64, BridgeError> {
    guarded("max_seqlen", || {
        Ok(BlockTable::new(table, blocks, t_max)?.max_seqlen())
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn write_kv_blocks(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    block_size: i64,
    causal: bool,
    kv_num_blocks: &mut [i32],
    kv_indices: &mut [i32],
    full_kv_num_blocks: &mut [i32],
    full_kv_indices: &mut [i32],
) -> Result<(), BridgeError> {
    guarded("write_kv_blocks", || {
        let out = KvBlocksMut {
            kv_num_blocks,
            kv_indices,
            full_kv_num_blocks,
            full_kv_indices,
        };
        BlockTable::new(table, blocks, t_max)?.write_kv_blocks(block_size, causal, out)
    })
}

pub(crate) fn write_attention_mask(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    causal: bool,
    out: &mut [bool],
) -> Result<(), BridgeError> {
    guarded("write_attention_mask", || {
        BlockTable::new(table, blocks, t_max)?.write_attention_mask(causal, out)
    })
}

pub(crate) fn table_column_names() -> Vec<String> {
    Column::ALL.map(|c| c.name().to_string()).into()
}

pub(crate) fn check_block_table(table: &[i64], blocks: i64, t_max: i64) -> Result<(), BridgeError> {
    guarded("check_block_table", || {
        BlockTable::new(table, blocks, t_max).map(drop)
    })
}

// The per-step table writers C++ calls: each checks the table as a batch `[blocks, t_max]`'s,
// then writes one table into the caller's buffer.
macro_rules! step_table_writers {
    ($($name:ident: $element:ty => $write:path;)*) => {$(
        pub(crate) fn $name(
            table: &[i64],
            blocks: i64,
            t_max: i64,
            out: &mut [$element],
        ) -> Result<(), BridgeError> {
            guarded(stringify!($name), || {
                $write(&BlockTable::new(table, blocks, t_max)?, out)
            })
        }
    )*};
}

step_table_writers! {
    write_valid_mask: bool => BlockTable::write_valid_mask;
    write_end_mask: bool => BlockTable::write_end_mask;
    write_segment_ids: i32 => BlockTable::write_segment_ids;
    write_position_ids: i64 => BlockTable::write_position_ids;
}

pub(crate) fn write_reset_mask(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    carry: bool,
    out: &mut [bool],
) -> Result<(), BridgeError> {
    guarded("write_reset_mask", || {
        BlockTable::with_carry(table, blocks, t_max, carry)?.write_reset_mask(out)
    })
}

pub(crate) fn write_carry_mask(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    out: &mut [bool],
) -> Result<(), BridgeError> {
    guarded("write_carry_mask", || {
        BlockTable::with_carry(table, blocks, t_max, true)?.write_carry_mask(out)
    })
}

pub(crate) fn write_cu_seqlens(table: &[i64], out: &mut [i32]) -> Result<(), BridgeError> {
    guarded("cu_seqlens", || bload::write_cu_seqlens(table, out))
}
