//! `bsrs_sign_key_challenge`: the signature a mod makes for the key registry
//! (proto-spec/http.md §8.13) verifies with the library's check, for exactly the player,
//! server and challenge it was made for; bad arguments are refused with their codes.
#![cfg(feature = "sign")]

use std::ffi::CString;

use bsor_stream_core::integrity::{verify_key_registration, SigningKey};
use bsor_stream_ffi::{
    bsrs_last_error, bsrs_sign_key_challenge, BSRS_ERR_INVALID, BSRS_ERR_NULL, BSRS_OK,
};

fn last_error() -> String {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: `buf` is writable for its length.
    unsafe { bsrs_last_error(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: bsrs_last_error NUL-terminates within `buf`.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_c_signature_verifies_with_the_librarys_check() {
    let seed = [7u8; 32];
    let challenge = [9u8; 32];
    let (player, server) = (
        CString::new("76561190000000000").unwrap(),
        CString::new("replays.example").unwrap(),
    );
    let mut sig = [0u8; 64];
    let mut public = [0u8; 32];
    // SAFETY: every pointer is valid for the lengths the function reads and writes.
    let rc = unsafe {
        bsrs_sign_key_challenge(
            seed.as_ptr(),
            player.as_ptr(),
            server.as_ptr(),
            challenge.as_ptr(),
            sig.as_mut_ptr(),
            public.as_mut_ptr(),
        )
    };
    assert_eq!(rc, BSRS_OK, "{}", last_error());
    let key = SigningKey::from_bytes(&seed).verifying_key().to_bytes();
    assert_eq!(public, key);
    assert_eq!(
        verify_key_registration(
            &key,
            "76561190000000000",
            "replays.example",
            &challenge,
            &sig
        ),
        Ok(())
    );
    // For another player, server or challenge it does not.
    assert!(verify_key_registration(
        &key,
        "76561190000000001",
        "replays.example",
        &challenge,
        &sig
    )
    .is_err());
    assert!(verify_key_registration(&key, "76561190000000000", "other", &challenge, &sig).is_err());
    assert!(
        verify_key_registration(&key, "76561190000000000", "replays.example", &[8; 32], &sig)
            .is_err()
    );

    // The public key is optional.
    let mut again = [0u8; 64];
    // SAFETY: as above; `out_public_key` may be NULL.
    let rc = unsafe {
        bsrs_sign_key_challenge(
            seed.as_ptr(),
            player.as_ptr(),
            server.as_ptr(),
            challenge.as_ptr(),
            again.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, BSRS_OK);
    assert_eq!(again, sig, "Ed25519 signatures are deterministic");
}

#[test]
fn bad_arguments_are_refused() {
    let seed = [7u8; 32];
    let challenge = [9u8; 32];
    let player = CString::new("p").unwrap();
    let empty = CString::new("").unwrap();
    let long = CString::new("x".repeat(257)).unwrap();
    let not_utf8 = CString::new(vec![0xffu8, 0xfe]).unwrap();
    let mut sig = [0u8; 64];
    // SAFETY (each call): valid pointers or NULL where the test says so.
    let call = |s: *const u8,
                p: *const std::ffi::c_char,
                n: *const std::ffi::c_char,
                c: *const u8,
                o: *mut u8| unsafe {
        bsrs_sign_key_challenge(s, p, n, c, o, std::ptr::null_mut())
    };
    let sp = sig.as_mut_ptr();
    assert_eq!(
        call(
            std::ptr::null(),
            player.as_ptr(),
            player.as_ptr(),
            challenge.as_ptr(),
            sp
        ),
        BSRS_ERR_NULL
    );
    assert_eq!(
        call(
            seed.as_ptr(),
            std::ptr::null(),
            player.as_ptr(),
            challenge.as_ptr(),
            sp
        ),
        BSRS_ERR_NULL
    );
    assert_eq!(
        call(
            seed.as_ptr(),
            player.as_ptr(),
            player.as_ptr(),
            std::ptr::null(),
            sp
        ),
        BSRS_ERR_NULL
    );
    assert_eq!(
        call(
            seed.as_ptr(),
            player.as_ptr(),
            player.as_ptr(),
            challenge.as_ptr(),
            std::ptr::null_mut()
        ),
        BSRS_ERR_NULL
    );
    assert_eq!(
        call(
            seed.as_ptr(),
            empty.as_ptr(),
            player.as_ptr(),
            challenge.as_ptr(),
            sp
        ),
        BSRS_ERR_INVALID
    );
    assert!(last_error().contains("player ID"), "{}", last_error());
    assert_eq!(
        call(
            seed.as_ptr(),
            player.as_ptr(),
            long.as_ptr(),
            challenge.as_ptr(),
            sp
        ),
        BSRS_ERR_INVALID
    );
    assert_eq!(
        call(
            seed.as_ptr(),
            not_utf8.as_ptr(),
            player.as_ptr(),
            challenge.as_ptr(),
            sp
        ),
        BSRS_ERR_INVALID
    );
    assert!(last_error().contains("UTF-8"));
}
