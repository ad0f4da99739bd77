//! The invariant of signed streams (proto-spec/integrity.md §8), by property: whatever a
//! mutated signed stream (chunks removed, duplicated, moved, swapped, inserted or replaced
//! from other recordings, payload bytes changed with good CRCs, numbered afresh or not, cut)
//! verifies as `valid` decodes, by the verifier and by a plain decode, to exactly the BSOR
//! that was signed. The fuzz target `signed_stream` runs the same mutations unbounded.

use crate::signed_mutations;

use std::sync::OnceLock;

use proptest::prelude::*;
use signed_mutations::{check, mutate, pool, Pool};

fn the_pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(pool)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(768))]

    #[test]
    fn whatever_verifies_decodes_to_what_was_signed(ops in proptest::collection::vec(any::<u8>(), 0..30)) {
        let p = the_pool();
        let s = mutate(p, &ops);
        check(p, &s);
    }
}

/// The mutations reach valid streams too (an event chunk swapped with a frame chunk of its
/// group keeps every record in order), so the invariant is exercised on both sides.
#[test]
fn some_mutations_stay_valid_and_most_do_not() {
    let p = the_pool();
    let (mut valid, mut total) = (0, 0);
    for i in 0..p.chunks.len() as u8 {
        for j in 0..p.chunks.len() as u8 {
            total += 1;
            valid += usize::from(check(p, &mutate(p, &[5, i, j])));
        }
    }
    assert!(valid > p.chunks.len(), "{valid} of {total}");
    assert!(valid < total / 2, "{valid} of {total}");
}
