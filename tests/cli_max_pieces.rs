//! `--max-pieces`: the cap on a block's pieces, as `stats` and `plan` take it.

use crate::cli_support;

use cli_support::{bload, json};

#[test]
fn plan_keeps_every_block_within_the_cap() {
    // The Action-Genome-shaped set at 94 steps puts up to a dozen sequences in a block.
    let line = "plan --lengths AG --t-max 94 --rank 0 --json";
    let most = |document: &serde_json::Value| {
        let batches = document["batches"].as_array().unwrap();
        let blocks = batches.iter().flat_map(|b| b["blocks"].as_array().unwrap());
        blocks
            .map(|block| block["pieces"].as_array().unwrap().len())
            .max()
            .unwrap()
    };
    let free = json(line);
    assert!(most(&free) > 3, "the set needs no cap to test one");
    assert!(free.get("max_pieces").is_none());
    let capped = json(&format!("{line} --max-pieces 3"));
    assert!(most(&capped) <= 3);
    assert_eq!(capped["max_pieces"], 3);
    // Fewer pieces a block, more blocks, and never below the bound reported under the cap.
    let blocks = |document: &serde_json::Value| document["stats"]["blocks"].as_u64().unwrap();
    assert!(blocks(&capped) > blocks(&free));
    let bound = capped["stats"]["lower_bound"]["blocks"].as_u64().unwrap();
    assert!(bound <= blocks(&capped));
    assert!(bound >= 7464 / 3, "the bound counts the cap: {bound}");
    assert_ne!(capped["plan_hash"], free["plan_hash"]);
}

#[test]
fn bad_caps_name_the_flag_or_the_option() {
    let out = bload("stats --lengths AG --t-max 94 --max-pieces 0");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--max-pieces = \"0\": expected"), "{err}");
    let out = bload("plan --lengths AG --t-max 94 --rank 0 --max-pieces");
    assert_eq!(out.status.code(), Some(2));
    // Lanes refuse a cap, naming the option; stats shows the refusal in lanes' row.
    let out = bload("plan --lengths AG --t-max 94 --rank 0 --policy lanes --max-pieces 2");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("max_pieces = 2: expected no cap"), "{err}");
    let stats = json("stats --lengths AG --t-max 94 --max-pieces 2 --json");
    let why = stats["policies"]["lanes"]["unavailable"].as_str().unwrap();
    assert!(why.contains("--max-pieces"), "{why}");
    assert!(stats["policies"]["best_fit"]["blocks"].as_u64().unwrap() >= 7464 / 2);
}
