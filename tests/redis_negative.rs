//! The negative controls N01–N04: each of the docs' broken Redis recipes must FAIL the scenario
//! it breaks, and still PASS S02 (it works as a lock on the happy path), so the failure is the
//! recipe's flaw and not a broken harness. A suite that passed them would have no teeth.

use lock_testkit::negative::{NegativeTarget, Recipe};
use lock_testkit::suite::{run, SuiteTarget as _, Verdict};

/// Runs the recipe's own scenario and S02, and checks the first fails and the second passes.
fn check(recipe: Recipe) {
    let target = NegativeTarget::new(recipe);
    let id = recipe.id();
    let happy = run(&target, "S02", id);
    assert_eq!(happy, Ok(Verdict::Pass), "{id} must work as a lock on the happy path (S02)");
    let scenario = recipe.must_fail();
    match run(&target, scenario, id) {
        Err(failure) => println!("[{}] {scenario} failed as it must: {failure}", target.label()),
        Ok(verdict) => {
            panic!("{id} ({}) passed {scenario} ({verdict:?}): the suite has no teeth", recipe.title())
        }
    }
}

#[test]
fn n01_setnx_then_expire_fails_s05() {
    check(Recipe::N01SetnxThenExpire);
}

#[test]
fn n02_del_without_owner_check_fails_s06() {
    check(Recipe::N02DelWithoutOwnerCheck);
}

#[test]
fn n03_same_value_for_every_holder_fails_s06() {
    check(Recipe::N03SameValueForEveryHolder);
}

#[test]
fn n04_get_compare_del_fails_s06() {
    check(Recipe::N04GetCompareDel);
}
