//! `bload::tch` (cargo feature `tch`): packed batches bit for bit equal to the C++ plugin's, the
//! plugin loader, and a TorchScript model calling `torch.ops.bload.*` loaded with `CModule`.
//! Needs `make plugin`'s build/libbload.so and the files `make test-tch` writes in build/
//! (BLOAD_LIBRARY, BLOAD_TCH_REFERENCE and BLOAD_MODEL override the paths).

use bload::tch::{load_plugin, pack_batch, pack_batch_from, pack_batch_ranges, Error, PackOptions};
use bload::{Options, Oversize, Planner, Policy};
use std::path::PathBuf;
use std::sync::Once;
use tch::{CModule, Device, IValue, Kind, Tensor};

fn path(variable: &str, default: &str) -> PathBuf {
    std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(default))
}

fn plugin() {
    static LOADED: Once = Once::new();
    LOADED.call_once(|| {
        let plugin = load_plugin(path("BLOAD_LIBRARY", "build/libbload.so")).unwrap();
        assert!(
            plugin.torch_version.starts_with("2.13"),
            "{}",
            plugin.torch_version
        );
    });
}

fn tensor(value: IValue) -> Tensor {
    match value {
        IValue::Tensor(tensor) => tensor,
        other => panic!("expected a tensor, got {other:?}"),
    }
}

fn same(name: &str, ours: &Tensor, theirs: &Tensor) {
    assert_eq!(ours.kind(), theirs.kind(), "{name}: kind");
    assert_eq!(ours.size(), theirs.size(), "{name}: shape");
    assert!(ours.equal(theirs), "{name}: values differ");
}

#[test]
fn packed_batches_equal_the_plugins_bit_for_bit() {
    plugin();
    let reference = CModule::load(path("BLOAD_TCH_REFERENCE", "build/tch_reference.pt")).unwrap();
    let lengths = Vec::<i64>::try_from(tensor(
        reference.method_is::<IValue>("lengths", &[]).unwrap(),
    ))
    .unwrap();
    let lengths: Vec<u32> = lengths.iter().map(|&n| n as u32).collect();
    // The reference's planner: t_max 48, 4 blocks per batch, 3 ranks, seed 11, split.
    let mut options = Options::new(48);
    options.blocks_per_batch = 4;
    options.world_size = 3;
    options.seed = 11;
    options.policy = Policy::BestFit;
    options.oversize = Oversize::Split;
    let planner = Planner::new(lengths.clone(), options).unwrap();
    assert!(
        lengths.iter().any(|&n| n > 48),
        "the reference covers split sequences"
    );

    tch::manual_seed(3);
    let data: Vec<Tensor> = lengths
        .iter()
        .map(|&n| Tensor::randn([i64::from(n), 3], (Kind::Float, Device::Cpu)))
        .collect();
    let target: Vec<Tensor> = lengths
        .iter()
        .map(|&n| Tensor::randint(10, [i64::from(n)], (Kind::Int64, Device::Cpu)))
        .collect();
    let pack_options = PackOptions {
        data_padding: -1.5,
        target_padding: -100.0,
        device: Device::Cpu,
        ..PackOptions::default()
    };
    let mut batches = 0;
    for epoch in 0..2u64 {
        let plan = planner.plan(epoch).unwrap();
        let theirs_per_rank = reference
            .method_is("batches_per_rank", &[IValue::Int(epoch as i64)])
            .unwrap();
        assert_eq!(theirs_per_rank, IValue::Int(plan.batches_per_rank() as i64));
        for rank in 0..3u32 {
            for index in 0..plan.batches_per_rank() {
                let batch = plan.batch(rank, index).unwrap();
                let ours = pack_batch_from(&batch, &data, &target, &pack_options).unwrap();
                // The global batch the plan says, as Python's and C++'s batches carry it.
                assert_eq!(ours.global, plan.global_batch(index).unwrap());
                let args = [
                    IValue::Int(epoch as i64),
                    IValue::Int(i64::from(rank)),
                    IValue::Int(index as i64),
                ];
                let table = tensor(reference.method_is("table", &args).unwrap());
                same("table", &ours.table, &table);

                let rows: Vec<usize> = Vec::<i64>::try_from(table.select(1, 3))
                    .unwrap()
                    .iter()
                    .map(|&s| s as usize)
                    .collect();
                let pieces = |all: &[Tensor]| {
                    IValue::TensorList(rows.iter().map(|&s| all[s].shallow_clone()).collect())
                };
                let outputs = reference
                    .forward_is(&[
                        pieces(&data),
                        pieces(&target),
                        IValue::Tensor(table.shallow_clone()),
                        IValue::Double(-1.5),
                        IValue::Double(-100.0),
                    ])
                    .unwrap();
                let IValue::Tuple(outputs) = outputs else {
                    panic!("expected a tuple")
                };
                let theirs: Vec<Tensor> = outputs.into_iter().map(tensor).collect();
                same("data", &ours.data, &theirs[0]);
                same("target", &ours.target, &theirs[1]);
                same("reset", &ours.reset, &theirs[2]);
                same("valid", &ours.valid, &theirs[3]);
                same("segment_ids", &ours.segment_ids, &theirs[4]);
                same("position_ids", &ours.position_ids, &theirs[5]);
                same("cu_seqlens", &ours.cu_seqlens, &theirs[6]);
                same("indices", &ours.indices, &table.select(1, 3));
                batches += 1;
            }
        }
    }
    assert!(batches > 10);
}

#[test]
fn torchscript_model_calling_bload_ops_loads_with_cmodule() {
    plugin();
    let model = CModule::load(path("BLOAD_MODEL", "build/packed_gru.pt")).unwrap();
    let planner = Planner::new(vec![30, 50, 12, 94, 7], Options::new(94)).unwrap();
    let plan = planner.plan(0).unwrap();
    let batch = plan.batch(0, 0).unwrap();
    let packed = pack_batch(&batch, &PackOptions::default(), |i| {
        let steps = [30, 50, 12, 94, 7][i];
        Ok::<_, Error>((
            Tensor::randn([steps, 16], (Kind::Float, Device::Cpu)),
            Tensor::zeros([steps, 1], (Kind::Float, Device::Cpu)),
        ))
    })
    .unwrap();
    let output = model.forward_ts(&[&packed.data, &packed.table]).unwrap();
    assert_eq!(output.size(), [1, 94, 1]);
}

#[test]
fn bad_sequences_and_loaders_are_errors_that_say_which() {
    let planner = Planner::new(vec![5, 3], Options::new(8)).unwrap();
    let plan = planner.plan(0).unwrap();
    let batch = plan.batch(0, 0).unwrap();
    let cpu = (Kind::Float, Device::Cpu);

    let wrong_length = pack_batch(&batch, &PackOptions::default(), |i| {
        Ok::<_, Error>((Tensor::zeros([4, 2], cpu), Tensor::zeros([[5, 3][i]], cpu)))
    });
    let message = wrong_length.unwrap_err().to_string();
    assert!(message.contains("steps (its planned length)"), "{message}");
    assert!(message.contains("data of sequence"), "{message}");

    let wrong_shape = pack_batch(&batch, &PackOptions::default(), |i| {
        let steps = [5, 3][i];
        Ok::<_, Error>((
            Tensor::zeros([steps, 1 + i as i64], cpu),
            Tensor::zeros([steps], cpu),
        ))
    });
    assert!(wrong_shape
        .unwrap_err()
        .to_string()
        .contains("like sequence"));

    let failing = pack_batch(&batch, &PackOptions::default(), |i| {
        Err::<(Tensor, Tensor), _>(format!("no file for {i}"))
    });
    let message = failing.unwrap_err().to_string();
    assert!(
        message.starts_with("loading sequence") && message.contains("no file for"),
        "{message}"
    );

    let too_few = pack_batch_from(
        &batch,
        &[Tensor::zeros([5], cpu)],
        &[],
        &PackOptions::default(),
    );
    assert!(too_few
        .unwrap_err()
        .to_string()
        .contains("data = 1 sequences"));
}

#[test]
fn plugin_loader_says_why_it_cannot_load() {
    let missing = load_plugin("/nonexistent/libbload.so")
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("/nonexistent/libbload.so: no such file"),
        "{missing}"
    );
    let junk = std::env::temp_dir().join(format!("bload-not-a-library-{}.so", std::process::id()));
    std::fs::write(&junk, b"not an ELF file").unwrap();
    let message = load_plugin(&junk).unwrap_err().to_string();
    std::fs::remove_file(&junk).unwrap();
    assert!(message.contains("cannot be loaded"), "{message}");
}

#[test]
fn a_batch_of_only_empty_blocks_is_all_padding() {
    // Five sequences a block each (pad_to_max), two ranks of two blocks: three of the eight
    // blocks are empty, and for some seeds one batch gets two of them.
    let cpu = (Kind::Float, Device::Cpu);
    let padding = PackOptions {
        data_padding: 7.0,
        target_padding: -1.0,
        device: Device::Cpu,
        ..PackOptions::default()
    };
    let lengths = [4i64, 3, 5, 2, 6];
    let mut empty = 0;
    for seed in 0..20 {
        let mut options = Options::new(6);
        options.world_size = 2;
        options.blocks_per_batch = 2;
        options.seed = seed;
        options.policy = Policy::PadToMax;
        let planner = Planner::new(vec![4, 3, 5, 2, 6], options).unwrap();
        let plan = planner.plan(0).unwrap();
        assert_eq!(plan.stats().empty_blocks, 3);
        for (rank, index) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let batch = plan.batch(rank, index).unwrap();
            let load = |i: usize| {
                Ok::<_, Error>((
                    Tensor::ones([lengths[i], 2], cpu),
                    Tensor::ones([lengths[i]], cpu),
                ))
            };
            let packed = pack_batch(&batch, &padding, load).unwrap();
            assert_eq!(packed.data.size(), [2, 6, 2]);
            if packed.table.size()[0] > 0 {
                continue;
            }
            empty += 1;
            assert_eq!(packed.data.eq(7.0).all().int64_value(&[]), 1);
            assert_eq!(packed.target.eq(-1.0).all().int64_value(&[]), 1);
            assert_eq!(packed.valid.sum(Kind::Int64).int64_value(&[]), 0);
            assert_eq!(packed.cu_seqlens.size(), [1]);
        }
    }
    assert!(empty > 0, "no seed gave a rank only empty blocks");
}

#[test]
fn a_lanes_batch_packed_from_ranges_equals_one_packed_from_whole_sequences() {
    // Sequences many times t_max: each lanes batch holds a window of them.
    let lengths: Vec<u32> = vec![40, 7, 33, 3, 25, 12];
    let mut options = Options::new(6);
    options.blocks_per_batch = 2;
    options.policy = Policy::Lanes;
    let planner = Planner::new(lengths.clone(), options).unwrap();
    let plan = planner.plan(0).unwrap();
    let cpu = (Kind::Float, Device::Cpu);
    let sequence = |i: usize| Tensor::arange(i64::from(lengths[i]), cpu) + 100.0 * i as f64;
    let mut asked = Vec::new();
    for index in 0..plan.batches_per_rank() {
        let batch = plan.batch(0, index).unwrap();
        let whole = pack_batch(&batch, &PackOptions::default(), |i| {
            Ok::<_, Error>((sequence(i).unsqueeze(1), sequence(i)))
        })
        .unwrap();
        let ranges = pack_batch_ranges(&batch, &PackOptions::default(), |i, offset, length| {
            asked.push(length);
            let steps = sequence(i).narrow(0, offset, length);
            Ok::<_, Error>((steps.unsqueeze(1), steps))
        })
        .unwrap();
        same("data", &ranges.data, &whole.data);
        same("target", &ranges.target, &whole.target);
        same("reset", &ranges.reset, &whole.reset);
        same("carry", &ranges.carry, &whole.carry);
    }
    // Only the windows were read: every step once, none longer than t_max.
    assert_eq!(
        asked.iter().sum::<i64>(),
        lengths.iter().map(|&n| i64::from(n)).sum::<i64>()
    );
    assert!(asked.iter().all(|&length| length <= 6));

    let batch = plan.batch(0, 0).unwrap();
    let wrong = pack_batch_ranges(&batch, &PackOptions::default(), |_, _, length| {
        Ok::<_, Error>((
            Tensor::zeros([length + 1, 1], cpu),
            Tensor::zeros([length], cpu),
        ))
    });
    let message = wrong.unwrap_err().to_string();
    assert!(message.contains("steps (the range asked for)"), "{message}");
}
