//! A plan's column: its own vector, a vector shared with the planner, or a slice of a memory-mapped
//! shared plan file (`shared/file.rs`). Plans read their columns as slices whatever backs them, so
//! the serving path (blocks, batches, hashes, positions) is one code for private and shared plans.

use super::mapping::Mapping;
use crate::alloc::try_copy;
use crate::error::Result;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

/// Element types a plan file stores as they lie in memory: `#[repr(C)]` records of `u32`s, with
/// no padding and no invalid bit patterns, so any 4-aligned bytes read as one.
///
/// # Safety
/// Implement only for such types.
pub(crate) unsafe trait Plain: Copy + 'static {}

unsafe impl Plain for u32 {}

pub(crate) enum Column<T: Plain> {
    /// Built by this process.
    Owned(Vec<T>),
    /// Shared with the planner (the lengths): counted once, by the planner.
    Shared(Arc<Vec<T>>),
    /// `len` elements at byte `offset` of a mapped plan file: no memory of this process's own.
    Mapped {
        map: Arc<Mapping>,
        offset: usize,
        len: usize,
        _type: PhantomData<T>,
    },
}

impl<T: Plain> Column<T> {
    /// `len` elements of `T` at byte `offset` of `map`, which the caller has checked lie inside
    /// it and are aligned for `T`.
    pub(crate) fn mapped(map: &Arc<Mapping>, offset: usize, len: usize) -> Self {
        debug_assert!(offset % std::mem::align_of::<T>() == 0);
        debug_assert!(offset + len * std::mem::size_of::<T>() <= map.len());
        Column::Mapped {
            map: Arc::clone(map),
            offset,
            len,
            _type: PhantomData,
        }
    }

    /// The column as a vector of this process's own, to build on: a shared or mapped column is
    /// first copied (fallibly). Only plans being built call this, and theirs are already owned.
    pub(crate) fn vec(&mut self, what: &str) -> Result<&mut Vec<T>> {
        if !matches!(self, Column::Owned(_)) {
            *self = Column::Owned(try_copy(what, self)?);
        }
        match self {
            Column::Owned(vec) => Ok(vec),
            // Made owned just above.
            _ => unreachable!("a column made owned is owned"),
        }
    }

    /// Bytes of this process's own memory the column holds (0 for shared and mapped ones).
    pub(crate) fn private_bytes(&self) -> usize {
        match self {
            Column::Owned(vec) => vec.capacity() * std::mem::size_of::<T>(),
            Column::Shared(_) | Column::Mapped { .. } => 0,
        }
    }

    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self, Column::Mapped { .. })
    }

    /// A mapped column's file still holds what was mapped (`Mapping::check_size`); other
    /// columns are this process's own.
    pub(crate) fn check_mapped(&self) -> Result<()> {
        match self {
            Column::Mapped { map, .. } => map.check_size(),
            Column::Owned(_) | Column::Shared(_) => Ok(()),
        }
    }
}

impl<T: Plain> Deref for Column<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Column::Owned(vec) => vec,
            Column::Shared(vec) => vec,
            Column::Mapped {
                map, offset, len, ..
            } => {
                // SAFETY: `mapped`'s caller checked the range lies in the mapping and is aligned;
                // `T: Plain` reads any bytes; the mapping is read-only and lives as long as `map`.
                unsafe { std::slice::from_raw_parts(map.as_ptr().add(*offset).cast::<T>(), *len) }
            }
        }
    }
}

impl<T: Plain> From<Vec<T>> for Column<T> {
    fn from(vec: Vec<T>) -> Self {
        Column::Owned(vec)
    }
}

impl<T: Plain> Default for Column<T> {
    fn default() -> Self {
        Column::Owned(Vec::new())
    }
}

impl<T: Plain> Clone for Column<T> {
    /// An owned column is copied (as `Vec::clone` would); shared and mapped ones are shared.
    fn clone(&self) -> Self {
        match self {
            Column::Owned(vec) => Column::Owned(vec.clone()),
            Column::Shared(vec) => Column::Shared(Arc::clone(vec)),
            Column::Mapped {
                map, offset, len, ..
            } => Column::mapped(map, *offset, *len),
        }
    }
}

impl<T: Plain + fmt::Debug> fmt::Debug for Column<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Plain + PartialEq, const N: usize> PartialEq<[T; N]> for Column<T> {
    fn eq(&self, other: &[T; N]) -> bool {
        **self == *other
    }
}

impl<T: Plain + PartialEq> PartialEq for Column<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}
