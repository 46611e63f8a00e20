//! Who may export: the bearer token, HTTPS with a certificate made for the
//! test (a CA of its own, never a key in the tree), and the refusal of a
//! TLS private key that others may read.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, exchange, frames, parse_response, post, start, Response, BIN};
use tokio_rustls::rustls;

const LOOPBACK: &str = "127.0.0.1:0";
const TOKEN: &str = "s3cret-t0ken";

/// Write `contents` to `dir/name` with `mode`.
fn write_file(dir: &Path, name: &str, contents: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// The bodies of traces frames in the log at `wal`.
fn traces_in(wal: &Path) -> Vec<Vec<u8>> {
    frames(wal)
        .into_iter()
        .filter(|(stream, _)| *stream == 1)
        .map(|(_, body)| body)
        .collect()
}

#[test]
fn without_the_bearer_token_an_export_is_refused_with_401_and_not_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    // A trailing newline, as editors and `echo` leave it, is not part of
    // the token.
    let token_file = write_file(tmp.path(), "token", &format!("{TOKEN}\n"), 0o600);
    let server = start(
        &wal,
        &out,
        LOOPBACK,
        &["--bearer-token-file", token_file.to_str().unwrap()],
    );
    let bearer = format!("Bearer {TOKEN}");
    let wrong = format!("Bearer {TOKEN}x");
    let short = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let basic = format!("Basic {TOKEN}");
    let refused: [&[(&str, &str)]; 5] = [
        &[],
        &[("Authorization", &wrong)],
        &[("Authorization", &short)],
        &[("Authorization", &basic)],
        &[("Authorization", "Bearer")],
    ];
    for headers in refused {
        let r = post(
            server.addr,
            "/v1/traces",
            headers,
            &common::traces(&["refused"], 0),
        );
        assert_eq!(r.status, 401, "{headers:?}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{headers:?}");
        assert!(!r.body.is_empty(), "a google.rpc.Status explains it");
    }
    // The scheme is case-insensitive (RFC 7235), the token is not.
    let lower = format!("bearer {TOKEN}");
    let upper = format!("Bearer {}", TOKEN.to_uppercase());
    assert_eq!(
        post(
            server.addr,
            "/v1/traces",
            &[("Authorization", &upper)],
            &common::traces(&["x"], 0)
        )
        .status,
        401
    );
    let kept = common::traces(&["kept"], 0);
    let r = post(
        server.addr,
        "/v1/traces",
        &[("Authorization", &bearer)],
        &kept,
    );
    assert_eq!(r.status, 200);
    let r = post(
        server.addr,
        "/v1/traces",
        &[("Authorization", &lower)],
        &kept,
    );
    assert_eq!(r.status, 200);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(
        traces_in(&wal),
        [kept.clone(), kept],
        "only the admitted bodies"
    );
}

/// A CA, and a certificate it signed for localhost and 127.0.0.1, with
/// its key: (CA certificate DER, certificate PEM, key PEM).
fn certificates() -> (rustls::pki_types::CertificateDer<'static>, String, String) {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    (
        ca_cert.der().clone(),
        leaf_cert.pem(),
        leaf_key.serialize_pem(),
    )
}

/// One request over TLS to `addr`, trusting only `ca`: the raw answer.
fn tls_exchange(
    addr: SocketAddr,
    ca: &rustls::pki_types::CertificateDer<'static>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut all = vec![("Content-Type", "application/x-protobuf")];
    all.extend_from_slice(headers);
    let raw = exchange(&mut tls, addr, "POST", "/v1/traces", &all, body).expect("a TLS exchange");
    parse_response(&raw)
}

#[test]
fn over_tls_an_export_with_the_token_lands_and_one_without_it_or_in_plaintext_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let (ca, cert_pem, key_pem) = certificates();
    let cert = write_file(tmp.path(), "cert.pem", &cert_pem, 0o644);
    let key = write_file(tmp.path(), "key.pem", &key_pem, 0o600);
    let flags = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--bearer-token",
        TOKEN,
    ];
    let server = start(&wal, &out, LOOPBACK, &flags);
    let bearer = format!("Bearer {TOKEN}");

    let kept = common::traces(&["over tls"], 0);
    let r = tls_exchange(server.addr, &ca, &[("Authorization", &bearer)], &kept);
    assert_eq!(r.status, 200, "{r:?}");
    let r = tls_exchange(server.addr, &ca, &[], &common::traces(&["no token"], 0));
    assert_eq!(r.status, 401, "{r:?}");

    // Plain HTTP to the TLS port: no HTTP answer, nothing stored.
    let mut tcp = TcpStream::connect(server.addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let headers = [
        ("Content-Type", "application/x-protobuf"),
        ("Authorization", bearer.as_str()),
    ];
    let plain = common::traces(&["plaintext"], 0);
    let answer = exchange(
        &mut tcp,
        server.addr,
        "POST",
        "/v1/traces",
        &headers,
        &plain,
    )
    .unwrap_or_default();
    assert!(
        !answer.starts_with(b"HTTP/"),
        "a plaintext request was answered: {:?}",
        String::from_utf8_lossy(&answer)
    );

    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(
        traces_in(&wal),
        [kept],
        "only the export over TLS with the token"
    );
}

#[test]
fn a_tls_key_that_others_may_read_is_refused_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, out) = (tmp.path().join("wal"), tmp.path().join("out"));
    let (_, cert_pem, key_pem) = certificates();
    let cert = write_file(tmp.path(), "cert.pem", &cert_pem, 0o644);
    let key = write_file(tmp.path(), "key.pem", &key_pem, 0o640);
    let run = Command::new(BIN)
        .args(["--listen", LOOPBACK, "--wal"])
        .arg(&wal)
        .arg("--out")
        .arg(&out)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success(),
        "started with an exposed key: {stderr}"
    );
    assert!(run.stdout.is_empty(), "it must not listen");
    assert!(
        stderr.contains(key.to_str().unwrap()),
        "names the file: {stderr}"
    );
    assert!(stderr.contains("0640"), "names the mode: {stderr}");
    assert!(
        stderr.contains("--allow-readable-key"),
        "says how: {stderr}"
    );

    let flags = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--allow-readable-key",
    ];
    let server = start(&wal, &out, LOOPBACK, &flags);
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{status}: {stderr}");
}

#[test]
fn the_default_address_is_loopback() {
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let listen = help
        .lines()
        .find(|l| l.trim_start().starts_with("--listen"))
        .expect("a --listen line");
    assert!(listen.contains("[default: 127.0.0.1:4318]"), "{listen}");
}
