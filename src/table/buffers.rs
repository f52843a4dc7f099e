//! A field's element type ([`FieldDtype`]), the Rust types of those written from the table, and
//! their buffers as one field-indexed list ([`FieldBuffer`]s in the declaration's order): what a
//! front end that allocates the fields by looping over the declaration (C++'s `batch_tables`
//! operator, through the bridge) passes, never naming one. The named buffers,
//! [`BatchTablesMut`], and each field's dtype are made from the declaration in `fields.rs`,
//! which uses this file (and not the other way round).
//!
//! [`BatchTablesMut`]: super::BatchTablesMut

use crate::error::{Error, Result};

/// A field's element type: the dataset's own for the data and targets, else a fixed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldDtype {
    /// The dtype the dataset's sequences have.
    Loaded,
    Bool,
    Int32,
    Int64,
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

/// One field's buffer, of the element type the core declares for it
/// ([`BatchField::dtype`](super::BatchField::dtype)).
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

    /// The next buffer, as field `name`'s: an error naming it if its dtype is another.
    pub fn take<T: FieldElement>(&mut self, name: &str) -> Result<&'o mut [T]> {
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
                name,
                format!("a buffer of {}", dtype.name()),
                format!("a buffer of {} (the core's declaration)", T::DTYPE.name()),
            )
        })
    }
}
