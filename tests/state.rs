//! A sampler's saved state (the one checkpoint format of C++ and Python): it resumes where it was
//! saved, and refuses a damaged state, one of another version or kind, and one saved for other
//! lengths or options, naming each field that differs with both values.

use bload::{Cost, Options, Planner, Policy, SamplerPlace, StateValue};

fn planner(seed: u64, t_max: u32) -> Planner {
    let mut options = Options::new(t_max);
    options.world_size = 2;
    options.blocks_per_batch = 2;
    options.seed = seed;
    Planner::new((1..200).map(|i| 1 + (i * 37) % 50).collect(), options).unwrap()
}

fn owned(fields: Vec<(&'static str, StateValue)>) -> Vec<(String, StateValue)> {
    fields
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

fn python(name: &str) -> String {
    format!("state[{name:?}]")
}

fn saved_at(planner: &Planner, batches: i64) -> Vec<(String, StateValue)> {
    let plan = planner.plan(3).unwrap();
    let position = plan.position(batches as usize).unwrap();
    owned(planner.sampler_state(&SamplerPlace {
        position: Some(position),
        next_epoch: 4,
    }))
}

fn error(planner: &Planner, fields: &[(String, StateValue)]) -> String {
    planner
        .resume_sampler_state(fields, &python)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_state_resumes_where_it_was_saved() {
    let planner = planner(0, 64);
    let state = saved_at(&planner, 5);
    let read = planner.resume_sampler_state(&state, &python).unwrap();
    let resumed = read.resumed.unwrap();
    assert_eq!(resumed.batches, 5);
    assert_eq!(resumed.plan.hash(), planner.plan(3).unwrap().hash());
    assert_eq!(read.next_epoch, 4);
    // In any order.
    let mut reversed = state.clone();
    reversed.reverse();
    assert!(planner.resume_sampler_state(&reversed, &python).is_ok());
    // Before the first epoch there is no position.
    let fresh = owned(planner.sampler_state(&SamplerPlace {
        position: None,
        next_epoch: 0,
    }));
    let read = planner.resume_sampler_state(&fresh, &python).unwrap();
    assert!(read.resumed.is_none());
}

#[test]
fn every_changed_value_is_caught_by_the_checksum() {
    let planner = planner(0, 64);
    let state = saved_at(&planner, 5);
    for index in 1..state.len() - 1 {
        let mut damaged = state.clone();
        damaged[index].1 = match &damaged[index].1 {
            StateValue::Int(value) => StateValue::Int(value ^ 1),
            StateValue::Bool(value) => StateValue::Bool(!value),
            StateValue::Text(text) => StateValue::Text(format!("{text}x")),
        };
        let message = error(&planner, &damaged);
        assert!(
            message.starts_with("state[\"checksum\"] = "),
            "{}: {message}",
            damaged[index].0
        );
        assert!(message.contains("the state is corrupted"), "{message}");
    }
}

#[test]
fn a_state_of_other_lengths_or_options_names_each_field_with_both_values() {
    let saver = planner(0, 64);
    let state = saved_at(&saver, 1);
    let other = planner(7, 60);
    let message = error(&other, &state);
    assert_eq!(
        message,
        "state[\"t_max\"] = 64: expected 60 as this sampler has, and state[\"seed\"] = 0: \
         expected 7 as this sampler has; the state was saved with other lengths or options"
    );
    let mut options = saver.options().clone();
    options.policy = Policy::Lanes;
    let lanes = Planner::new(saver.lengths().to_vec(), options).unwrap();
    assert!(error(&lanes, &state)
        .starts_with("state[\"policy\"] = \"best_fit\": expected \"lanes\" as this sampler has"));
    let fewer = Planner::new(saver.lengths()[1..].to_vec(), saver.options().clone()).unwrap();
    let message = error(&fewer, &state);
    assert!(
        message.starts_with(
            "state[\"sequences\"] = 199: expected 198 as this sampler has, and \
             state[\"lengths_hash\"] = "
        ),
        "{message}"
    );
}

#[test]
fn a_damaged_state_is_named() {
    let planner = planner(0, 64);
    let state = saved_at(&planner, 1);
    let mut missing = state.clone();
    missing.retain(|(name, _)| name != "seed");
    assert_eq!(
        error(&planner, &missing),
        "state[\"seed\"] = missing: expected every field a sampler's state_dict() or save() writes"
    );
    let mut text = state.clone();
    text[1].1 = StateValue::Text("199".into());
    assert_eq!(
        error(&planner, &text),
        "state[\"sequences\"] = a string: expected an int (a corrupted state)"
    );
    let mut version = state.clone();
    version[0].1 = StateValue::Int(1);
    assert_eq!(
        error(&planner, &version),
        "state[\"version\"] = 1: expected 2, this bload's format"
    );
    let mut extra = state.clone();
    extra.push(("epochs".into(), StateValue::Int(1)));
    assert!(error(&planner, &extra).starts_with("state[\"epochs\"] = present: expected only"));
}

#[test]
fn a_position_past_the_epoch_is_named_as_the_state_names_it() {
    let planner = planner(0, 64);
    let plan = planner.plan(3).unwrap();
    let batches = plan.batches_per_rank() as u64;
    let mut past = plan.position(0).unwrap();
    past.batches = batches + 1;
    // A whole state (its checksum is right) whose position lies past the epoch.
    let state = owned(planner.sampler_state(&SamplerPlace {
        position: Some(past),
        next_epoch: 4,
    }));
    let message = error(&planner, &state);
    assert!(
        message.starts_with(&format!(
            "state[\"position\"] = {}: expected from 0 to {batches}",
            batches + 1
        )),
        "{message}"
    );
}

/// A sampler that deals by another cost.
fn with_cost(planner: &Planner, cost: &str) -> Planner {
    let mut options = planner.options().clone();
    options.cost = cost.parse::<Cost>().unwrap();
    Planner::new(planner.lengths().to_vec(), options).unwrap()
}

#[test]
fn a_state_of_another_cost_is_refused_naming_the_cost() {
    let steps = planner(0, 64);
    let attention = with_cost(&steps, "attention:16");
    // A cost other than steps is saved, and resumes its own plan.
    let state = saved_at(&attention, 2);
    assert!(state.contains(&("cost".to_string(), StateValue::Text("attention:16".into()))));
    let resumed = attention.resume_sampler_state(&state, &python).unwrap();
    assert_eq!(
        resumed.resumed.unwrap().plan.hash(),
        attention.plan(3).unwrap().hash()
    );
    assert_eq!(
        error(&steps, &state),
        "state[\"cost\"] = \"attention:16\": expected \"steps\" as this sampler has; the state \
         was saved with other lengths or options"
    );
    let other = with_cost(&steps, "attention:17");
    assert!(error(&other, &state).starts_with(
        "state[\"cost\"] = \"attention:16\": expected \"attention:17\" as this sampler has"
    ));
    // A steps state has no cost field (as states saved before the option existed): it reads as
    // steps, and a sampler dealing by another cost refuses it, naming the cost.
    let old = saved_at(&steps, 2);
    assert!(old.iter().all(|(name, _)| name != "cost"));
    assert!(steps.resume_sampler_state(&old, &python).is_ok());
    assert_eq!(
        error(&attention, &old),
        "state[\"cost\"] = \"steps\": expected \"attention:16\" as this sampler has; the state \
         was saved with other lengths or options"
    );
}

#[test]
fn a_state_under_another_cap_is_refused_naming_max_pieces() {
    let free = planner(0, 64);
    let mut options = free.options().clone();
    options.max_pieces = Some(3);
    let capped = Planner::new(free.lengths().to_vec(), options).unwrap();
    // A cap is saved, and resumes its own plan.
    let state = saved_at(&capped, 2);
    assert!(state.contains(&("max_pieces".to_string(), StateValue::Text("3".into()))));
    let resumed = capped.resume_sampler_state(&state, &python).unwrap();
    assert_eq!(
        resumed.resumed.unwrap().plan.hash(),
        capped.plan(3).unwrap().hash()
    );
    assert!(error(&free, &state)
        .starts_with("state[\"max_pieces\"] = \"3\": expected \"none\" as this sampler has"));
    // A state without a cap has no such field (as states saved before the option existed).
    let old = saved_at(&free, 2);
    assert!(old.iter().all(|(name, _)| name != "max_pieces"));
    assert!(free.resume_sampler_state(&old, &python).is_ok());
    assert!(error(&capped, &old)
        .starts_with("state[\"max_pieces\"] = \"none\": expected \"3\" as this sampler has"));
}
