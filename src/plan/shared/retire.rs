//! Old epochs' files removed as the node moves on: at 8 bytes a sequence, a plan of 10^9
//! sequences is an 8 GB file, and a directory in /dev/shm that kept every epoch's would fill
//! the node's memory within a few epochs.
//!
//! When the node's writer has written epoch N, the files of epochs N-2 and before (whole epochs
//! and resumed ones, under the same options) are removed. That is safe for ranks that run the
//! epochs in step, as DDP's collectives make them: the writer only reaches epoch N after
//! serving every batch of epoch N-1, which every rank served beside it, so every rank has mapped
//! N-1 and none will open N-2 again. A rank that still maps an older file keeps serving it: a
//! removed file's pages live until its last mapping goes. Epoch N-1's file is kept, so a rank
//! one epoch behind still finds it.

use super::plan_name_prefix;
use crate::options::Options;
use std::path::Path;

/// Removes the files in `dir` of epochs before `epoch - 1` under `options`; errors are ignored
/// (another process may have removed a file first, and a file left is only memory, never a
/// wrong plan: names carry the epoch and mapping checks it).
pub(super) fn retire_old_epochs(dir: &Path, options: &Options, epoch: u64) {
    let Some(last_retired) = epoch.checked_sub(2) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = plan_name_prefix(options);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(of_epoch) = name.to_str().and_then(|name| epoch_of(name, &prefix)) else {
            continue;
        };
        if of_epoch <= last_retired {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The epoch of a plan file's name under `prefix` (`<prefix>N.plan` or `<prefix>N-resume-….plan`),
/// or None for any other name.
fn epoch_of(name: &str, prefix: &str) -> Option<u64> {
    let rest = name.strip_prefix(prefix)?.strip_suffix(".plan")?;
    let digits = rest.split_once("-resume-").map_or(rest, |(epoch, _)| epoch);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::epoch_of;

    #[test]
    fn only_plan_files_of_the_prefix_have_an_epoch() {
        let prefix = "bload-plan-00000000000000ab-epoch";
        assert_eq!(epoch_of(&format!("{prefix}7.plan"), prefix), Some(7));
        let resumed = format!("{prefix}12-resume-2-0-4x2-9.plan");
        assert_eq!(epoch_of(&resumed, prefix), Some(12));
        for other in [
            format!("{prefix}.plan"),
            format!("{prefix}7.plan.tmp"),
            format!(".{prefix}7.plan.1-2.tmp"),
            format!("{prefix}x7.plan"),
            "bload-plan-00000000000000cd-epoch7.plan".to_string(),
            "notes.txt".to_string(),
        ] {
            assert_eq!(epoch_of(&other, prefix), None, "{other}");
        }
    }
}
