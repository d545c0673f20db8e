//! The negative controls N01–N04, N06 and N07: each of the docs' broken Redis recipes must FAIL
//! the scenario it breaks, and (N01–N04, N07) still PASS S02 — it works as a lock on the happy path — so
//! the failure is the recipe's flaw and not a broken harness. A suite that passed them would
//! have no teeth.

use lock_redis::testkit::broken_recipes;

fn assert_caught(id: &str) {
    let recipes = broken_recipes();
    let recipe = recipes.iter().find(|recipe| recipe.id == id).expect("the recipe is listed");
    recipe.assert_caught();
}

#[test]
fn n01_setnx_then_expire_fails_s05() {
    assert_caught("N01");
}

#[test]
fn n02_del_without_owner_check_fails_s06() {
    assert_caught("N02");
}

#[test]
fn n03_same_value_for_every_holder_fails_s06() {
    assert_caught("N03");
}

#[test]
fn n04_get_compare_del_fails_s06() {
    assert_caught("N04");
}

#[test]
fn n06_redlock_without_fencing_fails_r02() {
    assert_caught("N06");
}

#[test]
fn n07_semaphore_counted_with_get_then_set_fails_sem01() {
    assert_caught("N07");
}
