//! The real services the storage tests use (PostgreSQL and an S3-compatible server), as
//! `scripts/services.sh start` announces them in the environment.
//!
//! A test asks for a service; when its variables are not set the test is skipped with a
//! notice on the terminal, unless `BSRS_REQUIRE_SERVICES=1` (as `.ci/run` sets it), under
//! which a missing service fails the test.
#![allow(dead_code)]

/// An S3-compatible server: its endpoint, a bucket that exists, and the credentials.
#[derive(Clone, Debug)]
pub struct S3 {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// A bucket the server holds.
    pub bucket: String,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: String,
    /// `AWS_REGION`.
    pub region: String,
}

/// The PostgreSQL URL (`BSRS_TEST_POSTGRES`), or `None` after a notice.
pub fn postgres() -> Option<String> {
    let url = var("BSRS_TEST_POSTGRES", "PostgreSQL");
    if let Some(u) = &url {
        assert!(
            u.starts_with("postgres://127.0.0.1:")
                || u.starts_with("postgres://postgres@127.0.0.1:"),
            "BSRS_TEST_POSTGRES must name a server on 127.0.0.1: {u}"
        );
    }
    url
}

/// The S3-compatible server (`BSRS_TEST_S3_ENDPOINT`, `BSRS_TEST_S3_BUCKET` and the `AWS_*`
/// credentials), or `None` after a notice.
pub fn s3() -> Option<S3> {
    let endpoint = var("BSRS_TEST_S3_ENDPOINT", "S3")?;
    assert!(
        endpoint.starts_with("http://127.0.0.1:"),
        "BSRS_TEST_S3_ENDPOINT must name a server on 127.0.0.1: {endpoint}"
    );
    let get = |name: &str| {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set beside BSRS_TEST_S3_ENDPOINT"))
    };
    Some(S3 {
        endpoint,
        bucket: get("BSRS_TEST_S3_BUCKET"),
        access_key_id: get("AWS_ACCESS_KEY_ID"),
        secret_access_key: get("AWS_SECRET_ACCESS_KEY"),
        region: get("AWS_REGION"),
    })
}

/// True when a missing service fails the tests instead of skipping them.
pub fn required() -> bool {
    std::env::var("BSRS_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

fn var(name: &str, what: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                !required(),
                "BSRS_REQUIRE_SERVICES=1 but {name} is not set: start the services with \
                 `eval \"$(scripts/services.sh start)\"`"
            );
            skip_notice(name, what);
            None
        }
    }
}

/// Says once per test binary and service that its tests are skipped, on the process's
/// stderr handle (which the test runner does not capture), as the corpus notice does.
fn skip_notice(name: &str, what: &str) {
    use std::io::Write;
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.iter().any(|s| s == name) {
        return;
    }
    said.push(name.to_owned());
    let text = format!(
        "\nNOTICE: {name} is not set: the tests of this binary that need {what} pass without \
         checking anything. Start the services with `eval \"$(scripts/services.sh start)\"` \
         (BSRS_REQUIRE_SERVICES=1 makes this a failure).\n"
    );
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
