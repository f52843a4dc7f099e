use super::*;
use crate::options::{Cost, Oversize, Policy};
use crate::plan::Resumed;
use std::time::Duration;

fn lengths(count: u32) -> Vec<u32> {
    (0..count).map(|i| 1 + (i * 7919) % 61).collect()
}

fn options(policy: Policy) -> Options {
    let mut options = Options::new(64);
    options.world_size = 3;
    options.blocks_per_batch = 2;
    options.seed = 11;
    options.policy = policy;
    options
}

/// A test's own directory, removed when the test ends (passed or failed).
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("bload-shared-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

fn tables(plan: &EpochPlan) -> Vec<Vec<[i64; 6]>> {
    let ranks = plan.options().world_size;
    (0..ranks)
        .flat_map(|rank| (0..plan.batches_per_rank()).map(move |batch| (rank, batch)))
        .map(|(rank, batch)| plan.batch(rank, batch).unwrap().table())
        .collect()
}

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn a_shared_plan_serves_every_rank_the_private_plans_batches() {
    let dir = temp_dir("same");
    let mut split = options(Policy::BestFit);
    split.oversize = Oversize::Split;
    split.t_max = 40;
    let mut cost = options(Policy::RandomFill);
    cost.cost = Cost::Attention { linear: 64 };
    for options in [
        options(Policy::BestFit),
        options(Policy::Lanes),
        split,
        cost,
    ] {
        let planner = Planner::new(lengths(500), options.clone()).unwrap();
        let private = planner.plan(4).unwrap();
        let path = planner.write_shared_plan(4, &dir).unwrap();
        assert_eq!(path, Planner::shared_plan_path(&dir, &options, 4));
        let shared = planner.map_shared_plan(4, &dir, WAIT).unwrap();
        assert!(shared.is_shared() && !private.is_shared());
        assert_eq!(tables(&shared), tables(&private), "{options:?}");
        assert_eq!(shared.hash(), private.hash());
        assert_eq!(shared.stats(), private.stats());
        assert_eq!(shared.position(1).unwrap(), private.position(1).unwrap());
        // A rank without the lengths reads the same planner from the file.
        let (reader, plan) = Planner::from_shared_plan(options, 4, &dir, WAIT).unwrap();
        assert_eq!(reader.lengths_hash(), planner.lengths_hash());
        assert_eq!(tables(&plan), tables(&private));
    }
}

#[test]
fn a_rank_serving_a_shared_plan_holds_under_a_byte_a_sequence() {
    let dir = temp_dir("memory");
    let count = 200_000;
    let options = options(Policy::BestFit);
    let planner = Planner::new(lengths(count), options.clone()).unwrap();
    let private = planner.plan(0).unwrap();
    // The private plan: 4 bytes a piece, 8 a block, and the planner's 4 a length.
    assert!(private.private_memory().bytes >= 4 * u64::from(count));
    assert!(planner.private_memory().bytes >= 4 * u64::from(count));
    planner.write_shared_plan(0, &dir).unwrap();
    let (reader, plan) = Planner::from_shared_plan(options, 0, &dir, WAIT).unwrap();
    let own = plan.private_memory().bytes + reader.private_memory().bytes;
    assert_eq!(plan.private_memory(), PrivateMemory::default());
    assert!(own <= u64::from(count), "{own} bytes for {count} sequences");
    assert!(reader.private_memory().allocations > 0);
}

#[test]
fn a_file_of_other_lengths_options_or_epoch_is_refused_by_name() {
    let dir = temp_dir("foreign");
    let options = options(Policy::BestFit);
    let planner = Planner::new(lengths(300), options.clone()).unwrap();
    let path = planner.write_shared_plan(2, &dir).unwrap();
    let named = |err: Error, field: &str| {
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains(field), "{text}");
    };
    let other_lengths = Planner::new(lengths(301), options.clone()).unwrap();
    named(
        other_lengths.map_shared_plan(2, &dir, WAIT).unwrap_err(),
        "(lengths)",
    );
    // Another epoch's (or options') file renamed to this one's name.
    std::fs::rename(&path, Planner::shared_plan_path(&dir, &options, 3)).unwrap();
    let err = planner.map_shared_plan(3, &dir, WAIT).unwrap_err();
    assert!(err.to_string().contains("(epoch)"), "{err}");
    let mut seeded = options.clone();
    seeded.seed += 1;
    std::fs::rename(
        Planner::shared_plan_path(&dir, &options, 3),
        Planner::shared_plan_path(&dir, &seeded, 2),
    )
    .unwrap();
    let err = Planner::from_shared_plan(seeded, 2, &dir, WAIT).unwrap_err();
    assert!(err.to_string().contains("(options)"), "{err}");
}

#[test]
fn a_damaged_or_foreign_file_is_refused_by_name() {
    let dir = temp_dir("damaged");
    let options = options(Policy::BestFit);
    let planner = Planner::new(lengths(300), options.clone()).unwrap();
    let path = planner.write_shared_plan(0, &dir).unwrap();
    let good = std::fs::read(&path).unwrap();
    let refused = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        let err = planner.map_shared_plan(0, &dir, WAIT).unwrap_err();
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        err.to_string()
    };
    // A flipped bit anywhere: in the header, the options, or any column.
    for at in [
        9,
        20,
        100,
        file::FIXED_HEADER + 3,
        good.len() / 2,
        good.len() - 20,
    ] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        let err = refused(&bad);
        assert!(
            err.contains("checksum") || err.contains("version"),
            "byte {at}: {err}"
        );
    }
    assert!(refused(&good[..good.len() - 8]).contains("(size)"));
    assert!(refused(b"not a plan at all, just some text").contains("(magic)"));
    assert!(refused(&[]).contains("0 bytes"));
    let mut version = good.clone();
    version[8] = 9;
    assert!(refused(&version).contains("(version)"));
    std::fs::write(&path, &good).unwrap();
    assert!(planner.map_shared_plan(0, &dir, WAIT).is_ok());
}

#[test]
fn a_reader_waits_for_the_writer_and_a_missing_file_is_named_after_the_timeout() {
    let dir = temp_dir("wait");
    let options = options(Policy::BestFit);
    let planner = Planner::new(lengths(300), options.clone()).unwrap();
    let err = planner
        .map_shared_plan(0, &dir, Duration::from_millis(50))
        .unwrap_err();
    let path = Planner::shared_plan_path(&dir, &options, 0);
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("timeout"), "{err}");
    let writer = {
        let (planner, dir) = (planner.clone(), dir.to_path_buf());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            planner.write_shared_plan(0, &dir).unwrap()
        })
    };
    let plan = planner
        .map_shared_plan(0, &dir, Duration::from_secs(30))
        .unwrap();
    assert_eq!(writer.join().unwrap(), path);
    assert_eq!(plan.hash(), planner.plan(0).unwrap().hash());
    // Nothing but the plan is left in the directory (the temporary name was renamed).
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
}

#[test]
fn the_writer_keeps_the_files_lengths_and_plans_later_epochs_from_them() {
    let dir = temp_dir("writer");
    let count = 200_000;
    let options = options(Policy::BestFit);
    let private = Planner::new(lengths(count), options.clone()).unwrap();
    let mut writer = Planner::new(lengths(count), options.clone()).unwrap();
    assert!(writer.private_memory().bytes >= 4 * u64::from(count));
    for epoch in 0..3 {
        writer.write_shared_plan(epoch, &dir).unwrap();
        let plan = writer.map_shared_plan(epoch, &dir, WAIT).unwrap();
        writer = writer.with_lengths_of(&plan).unwrap();
        // From epoch 1 on it plans from the lengths mapped from the epoch before's file.
        let expected = private.plan(epoch).unwrap();
        assert_eq!(tables(&plan), tables(&expected), "epoch {epoch}");
        assert_eq!(writer.lengths_hash(), private.lengths_hash());
        let own = writer.private_memory().bytes + plan.private_memory().bytes;
        assert!(own <= u64::from(count), "epoch {epoch}: {own} bytes");
        assert_eq!(plan.private_memory(), PrivateMemory::default());
    }
    // A plan of other lengths is refused; a private plan leaves the planner's lengths its own.
    let other = Planner::new(lengths(count - 1), options.clone()).unwrap();
    other.write_shared_plan(7, &dir).unwrap();
    let foreign = other.map_shared_plan(7, &dir, WAIT).unwrap();
    let err = writer.with_lengths_of(&foreign).unwrap_err();
    assert_eq!(err.argument, "plan");
    let kept = private.with_lengths_of(&private.plan(0).unwrap()).unwrap();
    assert_eq!(kept.private_memory(), private.private_memory());
}

fn resumed_tables(resumed: &Resumed, rank: u32) -> Vec<[i64; 6]> {
    let plan = &resumed.plan;
    (resumed.batches..plan.batches_per_rank())
        .flat_map(|batch| plan.batch(rank, batch).unwrap().table())
        .collect()
}

#[test]
fn a_resumed_epoch_is_served_from_the_file_as_the_private_resume_serves_it() {
    let dir = temp_dir("resume");
    let mut lanes = options(Policy::Lanes);
    lanes.blocks_per_batch = 2;
    // Each case: the options now, and the world size and blocks per batch saved with: the same
    // world size, more ranks, fewer, and a lanes epoch saved as 2 x 3 lanes, resumed as 3 x 2.
    for (now, saved_world_size, saved_blocks) in [
        (options(Policy::BestFit), 3, 2),
        (options(Policy::BestFit), 5, 2),
        (options(Policy::RandomFill), 2, 2),
        (lanes, 2, 3),
    ] {
        let lengths = lengths(2_000);
        let mut saved_options = now.clone();
        saved_options.world_size = saved_world_size;
        saved_options.blocks_per_batch = saved_blocks;
        let saved = Planner::new(lengths.clone(), saved_options).unwrap();
        let at = saved.plan(1).unwrap().position(2).unwrap();
        let writer = Planner::new(lengths.clone(), now.clone()).unwrap();
        let private = writer.resume(&at).unwrap();
        let written = writer.resume_on_node(&at, &dir, true, WAIT).unwrap();
        // A reader that never held the lengths: its planner's are epoch 0's file's.
        writer.write_shared_plan(0, &dir).unwrap();
        let (reader, _) = Planner::from_shared_plan(now.clone(), 0, &dir, WAIT).unwrap();
        let read = reader.resume_on_node(&at, &dir, false, WAIT).unwrap();
        for shared in [&written, &read] {
            assert!(shared.plan.is_shared());
            assert_eq!(shared.batches, private.batches, "{now:?}");
            assert_eq!(shared.plan.hash(), private.plan.hash());
            assert_eq!(shared.plan.stats(), private.plan.stats());
            let position = shared.plan.position(shared.batches).unwrap();
            assert_eq!(position, private.plan.position(private.batches).unwrap());
            for rank in 0..now.world_size {
                assert_eq!(resumed_tables(shared, rank), resumed_tables(&private, rank));
            }
        }
        let own = saved_world_size == now.world_size || now.policy == Policy::Lanes;
        let path = writer.shared_resume_path(&dir, &at);
        assert_eq!(
            path == Planner::shared_plan_path(&dir, &now, 1),
            own,
            "{}",
            path.display()
        );
    }
}

#[test]
fn a_reader_checks_what_it_can_of_a_resumed_position() {
    let dir = temp_dir("resume-bad");
    let options = options(Policy::BestFit);
    let planner = Planner::new(lengths(500), options.clone()).unwrap();
    let mut at = planner.plan(0).unwrap().position(1).unwrap();
    planner.resume_on_node(&at, &dir, true, WAIT).unwrap();
    // Past the epoch's end, refused by the reader too, from the file's own plan.
    at.batches = 10_000;
    let err = planner.resume_on_node(&at, &dir, false, WAIT).unwrap_err();
    assert_eq!(err.argument, "batches");
    at.batches = 1;
    at.blocks_per_batch = 5;
    let err = planner.resume_on_node(&at, &dir, false, WAIT).unwrap_err();
    assert_eq!(err.argument, "blocks_per_batch");
    // A position no writer wrote: an error naming its file after the timeout.
    at.blocks_per_batch = options.blocks_per_batch;
    at.world_size = 2;
    let err = planner
        .resume_on_node(&at, &dir, false, Duration::from_millis(30))
        .unwrap_err();
    let path = planner.shared_resume_path(&dir, &at);
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn writing_an_epoch_removes_the_files_of_epochs_two_before_it() {
    let dir = temp_dir("retire");
    let options = options(Policy::BestFit);
    let planner = Planner::new(lengths(300), options.clone()).unwrap();
    let private = planner.plan(0).unwrap();
    planner.write_shared_plan(0, &dir).unwrap();
    let mapped = planner.map_shared_plan(0, &dir, WAIT).unwrap();
    // Files of other options, and names that are not plans, are left alone.
    let other = Options {
        seed: 12,
        ..options.clone()
    };
    Planner::new(lengths(300), other.clone())
        .unwrap()
        .write_shared_plan(0, &dir)
        .unwrap();
    std::fs::write(dir.join("notes.txt"), "kept").unwrap();
    let exists = |epoch| Planner::shared_plan_path(&dir, &options, epoch).exists();
    planner.write_shared_plan(1, &dir).unwrap();
    assert!(exists(0) && exists(1));
    planner.write_shared_plan(2, &dir).unwrap();
    assert!(!exists(0) && exists(1) && exists(2));
    assert!(Planner::shared_plan_path(&dir, &other, 0).exists());
    assert!(dir.join("notes.txt").exists());
    // A rank still serving the removed epoch's mapping serves it whole.
    assert_eq!(tables(&mapped), tables(&private));
    // A resumed epoch's file (here of another world size's position) is retired like a whole
    // epoch's, once the epoch two after it is written.
    let saved = Planner::new(
        lengths(300),
        Options {
            world_size: 5,
            ..options.clone()
        },
    )
    .unwrap();
    let at = saved.plan(3).unwrap().position(1).unwrap();
    planner.resume_on_node(&at, &dir, true, WAIT).unwrap();
    let resumed = planner.shared_resume_path(&dir, &at);
    assert!(resumed.exists() && resumed != Planner::shared_plan_path(&dir, &options, 3));
    planner.write_shared_plan(4, &dir).unwrap();
    assert!(resumed.exists());
    planner.write_shared_plan(5, &dir).unwrap();
    assert!(!resumed.exists() && exists(4) && exists(5));
}
