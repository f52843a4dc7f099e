//! The element types of the fields written from the table, and their buffers as one
//! field-indexed list ([`FieldBuffer`]s in the declaration's order): what a front end that
//! allocates the fields by looping over the declaration (C++'s `batch_tables` operator, through
//! the bridge) passes, never naming one. The named buffers, [`BatchTablesMut`], are made from
//! the declaration in `fields.rs`.
//!
//! [`BatchTablesMut`]: super::BatchTablesMut

use super::{BatchField, FieldDtype};
use crate::error::{Error, Result};

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

/// An element type a field written from the table may have: its dtype, and its buffer in and
/// out of the list form.
pub trait FieldElement: Sized {
    const DTYPE: FieldDtype;
    fn buffer(values: &mut [Self]) -> FieldBuffer<'_>;
    fn values(buffer: FieldBuffer<'_>) -> Option<&mut [Self]>;
}

macro_rules! field_element {
    ($element:ty, $variant:ident) => {
        impl FieldElement for $element {
            const DTYPE: FieldDtype = FieldDtype::$variant;
            fn buffer(values: &mut [Self]) -> FieldBuffer<'_> {
                FieldBuffer::$variant(values)
            }
            fn values(buffer: FieldBuffer<'_>) -> Option<&mut [Self]> {
                match buffer {
                    FieldBuffer::$variant(values) => Some(values),
                    _ => None,
                }
            }
        }
    };
}

field_element!(bool, Bool);
field_element!(i32, Int32);
field_element!(i64, Int64);

/// A list of buffers, one per field written from the table, taken in the declaration's order.
pub(super) struct Buffers<'o>(std::vec::IntoIter<FieldBuffer<'o>>);

impl<'o> Buffers<'o> {
    /// `buffers`, checked to be `fields` of them.
    pub fn of(buffers: Vec<FieldBuffer<'o>>, fields: usize) -> Result<Self> {
        if buffers.len() != fields {
            return Err(Error::invalid(
                "buffers",
                format!("{} buffers", buffers.len()),
                format!("{fields} buffers, one per field written from the table"),
            ));
        }
        Ok(Buffers(buffers.into_iter()))
    }

    /// The next buffer, as `field`'s: an error naming the field if its dtype is another.
    pub fn take<T: FieldElement>(&mut self, field: BatchField) -> Result<&'o mut [T]> {
        let buffer = self.0.next().ok_or_else(|| {
            Error::invalid(
                "buffers",
                "too few buffers",
                "one per field written from the table",
            )
        })?;
        let dtype = buffer.dtype();
        T::values(buffer).ok_or_else(|| {
            Error::invalid(
                field.name(),
                format!("a buffer of {}", dtype.name()),
                format!("a buffer of {} (the core's declaration)", T::DTYPE.name()),
            )
        })
    }
}
