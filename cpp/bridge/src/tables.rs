//! The bridge's half of block tables and packed batches: the table's columns and checks, the
//! per-table writers behind the per-table operators, every table of a batch in one call, and the
//! core's one declaration of the batch's fields. Declared in the `#[cxx::bridge]` of `lib.rs`.
//! Each writer checks the table as a batch `[blocks, t_max]`'s, then writes into the caller's
//! buffer (a tensor's memory).

use super::ffi::{BatchFieldInfo, DimRule, TableBuffer};
use super::guard::{guarded, BridgeError};
use bload::{
    BatchField, BatchTablesMut, BlockTable, Column, FieldBuffer, FieldDtype, KvBlocksMut, Policy,
    Positions,
};

pub(crate) fn batch_fields() -> Vec<BatchFieldInfo> {
    BatchField::ALL
        .iter()
        .map(|field| BatchFieldInfo {
            name: field.name().into(),
            dtype: field.dtype().name().into(),
            shape: field.shape().rule().into(),
            from_table: field.from_table(),
            doc: field.doc().into(),
            dims: field
                .shape()
                .dim_rules()
                .iter()
                .map(|rule| DimRule {
                    // Small constants of the declaration (at most 6).
                    blocks: rule.blocks as i64,
                    t_max: rule.t_max as i64,
                    pieces: rule.pieces as i64,
                    constant: rule.constant as i64,
                })
                .collect(),
        })
        .collect()
}

pub(crate) fn policy_names() -> Vec<String> {
    Policy::ALL
        .iter()
        .map(|policy| policy.name().into())
        .collect()
}

/// Every table of a batch ([`BatchField::FROM_TABLE`], one buffer each, in that order), from one
/// check of the table.
///
/// # Safety
/// As the bridge's declaration says: each buffer is writable memory of its `bytes`, aligned for
/// its field's dtype, and no two overlap (the operator's own tensors).
pub(crate) unsafe fn write_batch_tables(
    table: &[i64],
    blocks: i64,
    t_max: i64,
    carry: bool,
    first_lane: i64,
    positions: &str,
    out: &[TableBuffer],
) -> Result<(), BridgeError> {
    guarded("write_batch_tables", || {
        let positions = Positions::from_name(positions)?;
        if out.len() != BatchField::FROM_TABLE.len() {
            let expected = format!(
                "{} buffers, one per field written from the table",
                BatchField::FROM_TABLE.len()
            );
            return Err(bload::Error::invalid(
                "buffers",
                format!("{} buffers", out.len()),
                expected,
            ));
        }
        let fields = BatchField::FROM_TABLE.iter().zip(out);
        // SAFETY: the caller's promise, above; each buffer's size and alignment are checked.
        let buffers = fields
            .map(|(field, buffer)| unsafe { field_buffer(*field, buffer) })
            .collect::<Result<Vec<_>, _>>()?;
        BlockTable::with_carry(table, blocks, t_max, carry)?
            .with_positions(positions)
            .write_batch(first_lane, BatchTablesMut::from_buffers(buffers)?)
    })
}

/// `buffer` as a slice of `field`'s declared element type, once its size is a whole number of
/// elements and its address fits the type (the writer then checks the number of elements).
///
/// # Safety
/// `buffer` is writable memory of its `bytes` that nothing else reads or writes meanwhile.
unsafe fn field_buffer(field: BatchField, buffer: &TableBuffer) -> bload::Result<FieldBuffer<'_>> {
    Ok(match field.dtype() {
        FieldDtype::Bool => FieldBuffer::Bool(unsafe { slice_of(field, buffer)? }),
        FieldDtype::Int32 => FieldBuffer::Int32(unsafe { slice_of(field, buffer)? }),
        FieldDtype::Int64 => FieldBuffer::Int64(unsafe { slice_of(field, buffer)? }),
        FieldDtype::Loaded => {
            return Err(bload::Error::invalid(
                field.name(),
                "a buffer",
                "no buffer: it is loaded",
            ))
        }
    })
}

/// # Safety
/// As [`field_buffer`]'s.
// The slice is the caller's memory that `buffer` only addresses, not part of `buffer`.
#[allow(clippy::mut_from_ref)]
unsafe fn slice_of<T>(field: BatchField, buffer: &TableBuffer) -> bload::Result<&mut [T]> {
    let size = std::mem::size_of::<T>();
    if buffer.bytes % size != 0 {
        let expected = format!(
            "a whole number of {} values of {size} bytes",
            field.dtype().name()
        );
        return Err(bload::Error::invalid(
            field.name(),
            format!("{} bytes", buffer.bytes),
            expected,
        ));
    }
    if buffer.bytes == 0 {
        return Ok(&mut []);
    }
    if buffer.address == 0 || buffer.address % std::mem::align_of::<T>() != 0 {
        let expected = format!(
            "a non-null address aligned to {}",
            std::mem::align_of::<T>()
        );
        return Err(bload::Error::invalid(
            field.name(),
            format!("address {:#x}", buffer.address),
            expected,
        ));
    }
    // SAFETY: non-null, aligned, of `bytes / size` elements that the caller lends us alone.
    Ok(unsafe { std::slice::from_raw_parts_mut(buffer.address as *mut T, buffer.bytes / size) })
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
