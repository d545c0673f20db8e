//! The negative control N05: source 003's primary-key lock without expiry works as a lock (S02)
//! and must FAIL S04 — a crashed holder's row keeps the lock held forever. A suite that passed
//! it would have no teeth.

use lock_sql::testkit::broken_recipes;

/// The name must equal [`lock_sql::testkit::N05_TEST`]: S04 re-runs this test as the holder process (were it
/// renamed, no holder would start and the check below would fail).
#[test]
fn n05_primary_key_lock_without_expiry_fails_s04() {
    let recipes = broken_recipes();
    let recipe = recipes.iter().find(|recipe| recipe.id == "N05").expect("N05 is listed");
    let caught = recipe.check().unwrap_or_else(|failure| panic!("N05 was not caught by S04: {failure}"));
    // Caught for the right reason: the lock outlived its holder, not a broken harness.
    assert!(caught.how.contains("stayed held"), "S04 failed for another reason: {}", caught.how);
    println!("[N05] S04 failed as it must: {}", caught.how);
}
