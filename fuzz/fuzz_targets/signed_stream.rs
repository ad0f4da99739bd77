//! Signed streams' invariant (proto-spec/integrity.md §8): whatever verifies as `valid`
//! decodes, by the verifying decode and by a plain decode, to exactly the BSOR that was
//! signed. The input picks mutations of a signed recording (core/tests/common/signed_mutations.rs,
//! shared with the proptest `core/tests/it/signed_props.rs`): chunks removed, duplicated, moved,
//! swapped, inserted or replaced from other recordings (another play under the same key,
//! the same play with other chunking and the same nonce, a forged copy), payload bytes
//! changed with good CRCs, numbering afresh or as found, a cut. No panic anywhere.
#![no_main]

#[path = "../../core/tests/common/signed_vectors.rs"]
mod signed_vectors;
#[path = "../../core/tests/common/signed_mutations.rs"]
mod signed_mutations;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use signed_mutations::{check, mutate, pool, Pool};

static POOL: OnceLock<Pool> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let p = POOL.get_or_init(pool);
    check(p, &mutate(p, data));
});
