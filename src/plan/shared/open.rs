//! Opening a shared plan file and checking it against the rank that maps it: the file's type
//! (a regular file, opened without blocking), its identity (epoch, options, lengths) and the
//! origin of its plan. `file.rs` checks the bytes themselves.

use super::file;
use super::mapping::Mapping;
use crate::error::Result;
use crate::options::Options;
use crate::plan::resume::Origin;
use crate::plan::{EpochPlan, EpochPosition};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A file of a whole epoch holds its own world size's plan from block 0; one of the rest of an
/// epoch resumed from `resumed`, the blocks of that position's plan from where it stood on.
pub(super) fn check_origin(
    plan: &EpochPlan,
    path: &Path,
    resumed: Option<&EpochPosition>,
) -> Result<()> {
    let origin = plan.origin;
    let (fits, expected) = match resumed {
        None => (
            origin == Origin::own(plan.options.world_size),
            "an epoch planned whole for its own world size".to_string(),
        ),
        Some(at) => (
            origin.planned_world_size == at.planned_world_size
                && origin.first_block >= at.first_block,
            format!(
                "the blocks of the plan for {} ranks from block {} on (the position resumed)",
                at.planned_world_size, at.first_block
            ),
        ),
    };
    if fits {
        return Ok(());
    }
    let value = format!(
        "planned for {} ranks from block {}",
        origin.planned_world_size, origin.first_block
    );
    Err(super::refused(path, "origin", value, expected))
}

/// The file's lengths are this rank's: their hash (of `count` lengths, where the rank knows it)
/// is the one the writer stored.
pub(super) fn check_lengths_hash(
    header: &file::Header,
    path: &Path,
    hash: u64,
    count: Option<usize>,
) -> Result<()> {
    if header.lengths_hash == hash {
        return Ok(());
    }
    let value = format!("lengths of hash {:#018x}", header.lengths_hash);
    let expected = match count {
        Some(count) => format!("this rank's lengths ({count} of hash {hash:#018x})"),
        None => format!(
            "this rank's lengths, of hash {hash:#018x} (another job's plan under the same \
             options? give each job a directory of its own)"
        ),
    };
    Err(super::refused(path, "lengths", value, expected))
}

pub(super) fn check_identity(
    header: &file::Header,
    path: &Path,
    options: &Options,
    epoch: u64,
) -> Result<()> {
    if header.epoch != epoch {
        return Err(super::refused(
            path,
            "epoch",
            header.epoch,
            format!("epoch {epoch}"),
        ));
    }
    if header.options != *options {
        let expected = format!("this rank's options {}", options.to_json());
        return Err(super::refused(
            path,
            "options",
            header.options.to_json(),
            expected,
        ));
    }
    Ok(())
}

/// The file at `path` mapped and its header read, once it exists (polled until `timeout`).
/// Opened without blocking, and refused unless a regular file: a FIFO at the name would block an
/// open, and a device or FIFO maps as nothing a plan file is.
pub(super) fn open(path: &Path, timeout: Duration) -> Result<(Arc<Mapping>, file::Header)> {
    if timeout.as_secs_f64() > super::MAX_SHARED_PLAN_TIMEOUT_S {
        // (Duration::MAX would wait for ever on a writer that failed.)
        return Err(crate::Error::invalid(
            "timeout",
            format!("{} s", timeout.as_secs_f64()),
            format!("at most {} s", super::MAX_SHARED_PLAN_TIMEOUT_S),
        ));
    }
    let start = Instant::now();
    let mut options = std::fs::OpenOptions::new();
    options.read(true).custom_flags(libc::O_NONBLOCK);
    let file = loop {
        match options.open(path) {
            Ok(file) => break file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && start.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let expected = format!(
                    "the file the node's planning rank writes, within the timeout ({} s); did it fail or plan other options?",
                    timeout.as_secs_f64()
                );
                return Err(super::refused(path, "missing", "no such file", expected));
            }
            Err(err) => return Err(super::refused(path, "open", err, "a readable file")),
        }
    };
    let metadata = file
        .metadata()
        .map_err(|err| super::refused(path, "open", err, "a file fstat can read"))?;
    if !metadata.is_file() {
        let value = file_kind(&metadata.file_type());
        let expected = "a regular file, the plan the node's planning rank writes";
        return Err(super::refused(path, "file type", value, expected));
    }
    let map = Arc::new(Mapping::of(file, path)?);
    let header = file::read_header(map.bytes(), path)?;
    Ok((map, header))
}

/// What a file that is not a regular file is, in words.
fn file_kind(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}
