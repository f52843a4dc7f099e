//! The caller's buffers that [`BlockTable::write_batch`] writes, one per field of
//! [`BatchField::FROM_TABLE`]: named, for the writer, and as one field-indexed list
//! ([`FieldBuffer`]s in the declaration's order), for a front end that allocates the fields by
//! looping over the declaration (C++'s `batch_tables` operator, through the bridge) and so
//! never names one.
//!
//! [`BlockTable::write_batch`]: super::BlockTable::write_batch

use super::{BatchField, FieldDtype};
use crate::error::{Error, Result};

/// The buffers [`BlockTable::write_batch`](super::BlockTable::write_batch) writes, each of the
/// size its [`FieldShape`](super::FieldShape) gives.
pub struct BatchTablesMut<'o> {
    pub reset: &'o mut [bool],
    pub valid: &'o mut [bool],
    pub ends: &'o mut [bool],
    pub carry: &'o mut [bool],
    pub lanes: &'o mut [i64],
    pub segment_ids: &'o mut [i32],
    pub position_ids: &'o mut [i64],
    pub cu_seqlens: &'o mut [i32],
    pub indices: &'o mut [i64],
    pub state_in: &'o mut [i64],
    pub state_out: &'o mut [i64],
    pub document_ids: &'o mut [i32],
    pub cu_seqlens_padded: &'o mut [i32],
}

/// One field's buffer, of the element type the core declares for it ([`BatchField::dtype`]).
pub enum FieldBuffer<'o> {
    Bool(&'o mut [bool]),
    Int32(&'o mut [i32]),
    Int64(&'o mut [i64]),
}

impl FieldBuffer<'_> {
    pub fn dtype(&self) -> FieldDtype {
        match self {
            FieldBuffer::Bool(_) => FieldDtype::Bool,
            FieldBuffer::Int32(_) => FieldDtype::Int32,
            FieldBuffer::Int64(_) => FieldDtype::Int64,
        }
    }
}

impl<'o> BatchTablesMut<'o> {
    /// The buffers as a list in [`BatchField::FROM_TABLE`] order.
    pub fn into_buffers(self) -> Vec<FieldBuffer<'o>> {
        use FieldBuffer::{Bool, Int32, Int64};
        vec![
            Bool(self.reset),
            Bool(self.valid),
            Bool(self.ends),
            Bool(self.carry),
            Int64(self.lanes),
            Int32(self.segment_ids),
            Int64(self.position_ids),
            Int32(self.cu_seqlens),
            Int64(self.indices),
            Int64(self.state_in),
            Int64(self.state_out),
            Int32(self.document_ids),
            Int32(self.cu_seqlens_padded),
        ]
    }

    /// The named buffers of a list in [`BatchField::FROM_TABLE`] order, each checked to have its
    /// field's declared dtype (the writer checks their sizes).
    pub fn from_buffers(buffers: Vec<FieldBuffer<'o>>) -> Result<Self> {
        let fields = BatchField::FROM_TABLE;
        if buffers.len() != fields.len() {
            return Err(Error::invalid(
                "buffers",
                format!("{} buffers", buffers.len()),
                format!(
                    "{} buffers, one per field written from the table",
                    fields.len()
                ),
            ));
        }
        for (field, buffer) in fields.iter().zip(&buffers) {
            if buffer.dtype() != field.dtype() {
                return Err(Error::invalid(
                    field.name(),
                    format!("a buffer of {}", buffer.dtype().name()),
                    format!(
                        "a buffer of {} (the core's declaration)",
                        field.dtype().name()
                    ),
                ));
            }
        }
        use FieldBuffer::{Bool, Int32, Int64};
        // Checked above against the declaration, which this order follows.
        let Ok(
            [Bool(reset), Bool(valid), Bool(ends), Bool(carry), Int64(lanes), Int32(segment_ids), Int64(position_ids), Int32(cu_seqlens), Int64(indices), Int64(state_in), Int64(state_out), Int32(document_ids), Int32(cu_seqlens_padded)],
        ) = <[FieldBuffer<'o>; 13]>::try_from(buffers)
        else {
            return Err(Error::invalid(
                "buffers",
                "buffers in another order",
                "the order of BatchField::FROM_TABLE",
            ));
        };
        Ok(BatchTablesMut {
            reset,
            valid,
            ends,
            carry,
            lanes,
            segment_ids,
            position_ids,
            cu_seqlens,
            indices,
            state_in,
            state_out,
            document_ids,
            cu_seqlens_padded,
        })
    }
}
