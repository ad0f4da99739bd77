//! TLS for the live protocol (`wire.md` §1): rustls with the `ring` provider, TLS 1.3 only,
//! configured from PEM files. The client side ([`client_config`]) trusts the certificates
//! of one CA file and nothing else (a headset has no system store to fall back on); the
//! server side ([`server_config`], the relay's) serves one certificate chain
//! and its key. Errors name the file and what is wrong with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

mod crypto;

/// The largest PEM file read: certificate chains and keys are a few kilobytes.
const MAX_PEM: u64 = 1 << 20;

/// What went wrong setting TLS up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("{}: {err}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        err: std::io::Error,
    },
    /// A PEM file is larger than any certificate chain or key.
    #[error("{}: larger than {MAX_PEM} bytes; not a certificate or key file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A PEM file does not parse.
    #[error("{}: not valid PEM: {err}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        err: rustls::pki_types::pem::Error,
    },
    /// A PEM file holds no item of the kind it should.
    #[error("{}: no {what} in this PEM file", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// What was looked for ("certificate", "private key").
        what: &'static str,
    },
    /// rustls refused the certificates or the key.
    #[error("{}: {err}", path.display())]
    Rejected {
        /// The file.
        path: PathBuf,
        /// rustls's reason.
        err: rustls::Error,
    },
    /// The address has no host name or IP address to check the certificate against.
    #[error("{addr}: no host name to check the relay's certificate against")]
    BadServerName {
        /// The address (`HOST:PORT`).
        addr: String,
    },
}

/// Reads a PEM file of at most [`MAX_PEM`] bytes.
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let read = |err| TlsError::Read {
        path: path.to_path_buf(),
        err,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_PEM {
        return Err(TlsError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// The certificates in a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Pem {
            path: path.to_path_buf(),
            err,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Missing {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The relay's provider: all of ring's TLS 1.3 suites, groups and signature algorithms.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Random numbers for the handshake, from ring (the operating system's generator), as
/// rustls's own ring provider does.
#[derive(Debug)]
struct SystemRandom;

impl rustls::crypto::SecureRandom for SystemRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), rustls::crypto::GetRandomFailed> {
        use ring::rand::SecureRandom;
        ring::rand::SystemRandom::new()
            .fill(buf)
            .map_err(|_| rustls::crypto::GetRandomFailed)
    }
}

/// Clients present no certificate, so they load no private key: this refuses every key,
/// which keeps ring's signing code (RSA, ECDSA, Ed25519) out of the mod library.
#[derive(Debug)]
struct NoPrivateKeys;

impl rustls::crypto::KeyProvider for NoPrivateKeys {
    fn load_private_key(
        &self,
        _key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn rustls::sign::SigningKey>, rustls::Error> {
        Err(rustls::Error::General(
            "a live-protocol client presents no certificate".into(),
        ))
    }
}

/// The clients' provider (the live sink's, and `publish`'s and `watch`'s, so that a relay
/// one reaches is one the others reach), cut to what they use so that the linker drops the
/// rest of ring and rustls (the mod library's size budget, scripts/cross-test.sh): TLS 1.3
/// with ring's AES-128-GCM, X25519 and P-256 key exchange (AES-128-GCM and P-256 are what
/// every TLS 1.3 server must offer, RFC 8446 §9.1) and ECDSA (P-256, P-384) and Ed25519
/// signatures on the crates of [`crypto`] instead of ring's, no private keys.
fn client_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256],
        kx_groups: vec![&crypto::X25519, &crypto::Secp256r1],
        signature_verification_algorithms: crypto::SIG_ALGS,
        secure_random: &SystemRandom,
        key_provider: &NoPrivateKeys,
    })
}

/// A client configuration that trusts the certificates in `ca_file` (PEM; a CA or the
/// relay's own self-signed certificate) and no others.
pub fn client_config(ca_file: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let rejected = |err| TlsError::Rejected {
        path: ca_file.to_path_buf(),
        err,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca_file)? {
        roots.add(cert).map_err(rejected)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(client_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rejected)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A server configuration presenting the certificate chain in `cert_file` (PEM, the
/// relay's certificate first) with the private key in `key_file` (PEM: PKCS#8, PKCS#1 or
/// SEC1).
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    use rustls::pki_types::PrivateKeyDer;
    let chain = certificates(cert_file)?;
    let pem = read_pem(key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|err| match err {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Missing {
            path: key_file.to_path_buf(),
            what: "private key",
        },
        err => TlsError::Pem {
            path: key_file.to_path_buf(),
            err,
        },
    })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|err| TlsError::Rejected {
            path: cert_file.to_path_buf(),
            err,
        })?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|err| TlsError::Rejected {
            path: key_file.to_path_buf(),
            err,
        })?;
    Ok(Arc::new(config))
}

/// The host of `addr` (`HOST:PORT`, `[V6]:PORT`, or a `ws://`/`wss://` URL), as the name the
/// relay's certificate must carry.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let bad = || TlsError::BadServerName { addr: addr.into() };
    let rest = addr
        .strip_prefix("wss://")
        .or_else(|| addr.strip_prefix("ws://"))
        .unwrap_or(addr);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().ok_or_else(bad)?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    if host.is_empty() {
        return Err(bad());
    }
    ServerName::try_from(host.to_string()).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_host_part() {
        let name = |a: &str| server_name(a).map(|n| n.to_str().into_owned());
        assert_eq!(name("relay.example:7000").unwrap(), "relay.example");
        assert_eq!(name("127.0.0.1:7000").unwrap(), "127.0.0.1");
        assert_eq!(name("[::1]:7000").unwrap(), "::1");
        assert_eq!(
            name("wss://relay.example:443/live").unwrap(),
            "relay.example"
        );
        assert_eq!(name("localhost").unwrap(), "localhost");
        assert!(matches!(
            server_name(":7000"),
            Err(TlsError::BadServerName { .. })
        ));
        assert!(server_name("bad host:1").is_err());
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.pem");
        let err = client_config(&missing).unwrap_err();
        assert!(matches!(err, TlsError::Read { .. }), "{err}");
        assert!(err.to_string().contains("none.pem"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no pem here\n").unwrap();
        let err = client_config(&empty).unwrap_err();
        assert!(
            matches!(
                err,
                TlsError::Missing {
                    what: "certificate",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("empty.pem"), "{err}");
    }

    #[test]
    fn a_key_file_without_a_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert_file = dir.path().join("cert.pem");
        std::fs::write(&cert_file, cert.cert.pem()).unwrap();
        // The certificate where the key should be.
        let err = server_config(&cert_file, &cert_file).unwrap_err();
        assert!(
            matches!(
                err,
                TlsError::Missing {
                    what: "private key",
                    ..
                }
            ),
            "{err}"
        );
        let key_file = dir.path().join("key.pem");
        std::fs::write(&key_file, cert.key_pair.serialize_pem()).unwrap();
        assert!(server_config(&cert_file, &key_file).is_ok());
        // Another certificate's key does not match.
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&key_file, other.key_pair.serialize_pem()).unwrap();
        let err = server_config(&cert_file, &key_file).unwrap_err();
        assert!(matches!(err, TlsError::Rejected { .. }), "{err}");
    }

    /// A self-signed certificate for `localhost` with `key`, and the relay's configuration
    /// serving it (PEM files in `dir`).
    fn relay_with(
        dir: &Path,
        name: &str,
        key: rcgen::KeyPair,
    ) -> (PathBuf, Arc<rustls::ServerConfig>) {
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_file = dir.join(format!("{name}.pem"));
        let key_file = dir.join(format!("{name}.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let server = server_config(&cert_file, &key_file).unwrap();
        (cert_file, server)
    }

    /// A TLS handshake in memory between `client` and `server`: the first error of either
    /// side, or `Ok` once both are through.
    fn handshake(
        client: Arc<rustls::ClientConfig>,
        server: Arc<rustls::ServerConfig>,
    ) -> Result<(), rustls::Error> {
        let name = ServerName::try_from("localhost").unwrap();
        let mut c = rustls::ClientConnection::new(client, name).unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        // A TLS 1.3 handshake is two flights each way; a few more rounds are headroom.
        for _ in 0..8 {
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).unwrap();
            }
            s.read_tls(&mut wire.as_slice()).unwrap();
            let server_result = s.process_new_packets().map(|_| ());
            let mut wire = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut wire).unwrap();
            }
            c.read_tls(&mut wire.as_slice()).unwrap();
            // The client's error first: it is the side under test.
            c.process_new_packets()?;
            server_result?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish in 8 rounds");
    }

    /// A CA named `ca_name` with a key of `ca_alg` and a relay certificate for `localhost`
    /// with a key of `relay_alg` that it signs: the CA's certificate as a PEM file in `dir` and
    /// the relay's configuration. With `tamper`, one bit of the CA's signature on the relay's
    /// certificate is flipped.
    fn relay_signed_by(
        dir: &Path,
        ca_name: &str,
        ca_alg: &'static rcgen::SignatureAlgorithm,
        relay_alg: &'static rcgen::SignatureAlgorithm,
        tamper: bool,
    ) -> (PathBuf, Arc<rustls::ServerConfig>) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate_for(ca_alg).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate_for(relay_alg).unwrap();
        let cert = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let mut cert = cert.der().to_vec();
        if tamper {
            // The last byte of the signature, the certificate's last field.
            *cert.last_mut().unwrap() ^= 1;
        }
        let ca_file = dir.join(format!("{ca_name}.pem"));
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.into()], key)
            .unwrap();
        (ca_file, Arc::new(server))
    }

    const KEY_TYPES: [&rcgen::SignatureAlgorithm; 3] = [
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &rcgen::PKCS_ED25519,
    ];

    #[test]
    fn clients_accept_relays_signed_by_their_ca_with_any_key_type() {
        let dir = tempfile::tempdir().unwrap();
        for ca_alg in KEY_TYPES {
            for relay_alg in KEY_TYPES {
                let (ca, server) = relay_signed_by(dir.path(), "CA", ca_alg, relay_alg, false);
                handshake(client_config(&ca).unwrap(), server)
                    .unwrap_or_else(|e| panic!("{ca_alg:?} CA, {relay_alg:?} relay: {e}"));
            }
        }
    }

    #[test]
    fn clients_refuse_another_cas_relay_and_a_tampered_signature() {
        use rustls::{CertificateError, Error};
        let dir = tempfile::tempdir().unwrap();
        for alg in KEY_TYPES {
            let (_, server) = relay_signed_by(dir.path(), "CA", alg, alg, false);
            // Another CA of the same key type, in the file the client trusts.
            let (other_ca, _) = relay_signed_by(dir.path(), "another CA", alg, alg, false);
            let err = handshake(client_config(&other_ca).unwrap(), server.clone()).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidCertificate(CertificateError::UnknownIssuer)
                ),
                "{alg:?}: {err}"
            );
            // Another CA of the same name: its key does not check the relay's certificate.
            let (same_name, _) = relay_signed_by(dir.path(), "CA", alg, alg, false);
            let err = handshake(client_config(&same_name).unwrap(), server).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidCertificate(CertificateError::BadSignature)
                ),
                "{alg:?}: {err}"
            );
            let (ca, server) = relay_signed_by(dir.path(), "CA", alg, alg, true);
            let err = handshake(client_config(&ca).unwrap(), server).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidCertificate(CertificateError::BadSignature)
                ),
                "{alg:?}: {err}"
            );
        }
    }

    /// Each key exchange group of the clients alone, against the relay's (ring's).
    #[test]
    fn clients_agree_keys_with_x25519_alone_and_p256_alone() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let (cert, server) = relay_with(dir.path(), "kx", key);
        for group in client_provider().kx_groups.iter() {
            let mut provider = (*client_provider()).clone();
            provider.kx_groups = vec![*group];
            let mut roots = rustls::RootCertStore::empty();
            roots.add(certificates(&cert).unwrap().remove(0)).unwrap();
            let client = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            handshake(Arc::new(client), server.clone())
                .unwrap_or_else(|e| panic!("{group:?}: {e}"));
        }
    }

    #[test]
    fn clients_accept_ecdsa_and_ed25519_relays_and_refuse_rsa() {
        let dir = tempfile::tempdir().unwrap();
        for alg in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_ED25519,
        ] {
            let key = rcgen::KeyPair::generate_for(alg).unwrap();
            let (cert, server) = relay_with(dir.path(), "accepted", key);
            let client = client_config(&cert).unwrap();
            handshake(client, server).unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        }
        // A test-only RSA key (rcgen cannot make one with ring): its certificate is refused,
        // while ring's whole provider takes it, so the refusal is the key type's.
        let pem = include_str!("../../tests/data/rsa-2048-test-key.pem");
        let key = rcgen::KeyPair::from_pem_and_sign_algo(pem, &rcgen::PKCS_RSA_SHA256).unwrap();
        let (cert, server) = relay_with(dir.path(), "rsa", key);
        let err = handshake(client_config(&cert).unwrap(), server.clone()).unwrap_err();
        assert!(
            matches!(
                err,
                rustls::Error::AlertReceived(_) | rustls::Error::PeerIncompatible(_)
            ),
            "{err}"
        );
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certificates(&cert).unwrap().remove(0)).unwrap();
        let everything = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        handshake(Arc::new(everything), server).unwrap();
    }
}
