use super::*;
use crate::options::{Cost, Oversize, Policy};
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

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bload-shared-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
        let (planner, dir) = (planner.clone(), dir.clone());
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
