//! Who may export, and over what: the optional bearer token every export
//! must carry, and HTTPS from a PEM certificate chain and private key.
//!
//! Without either, the receiver is plain HTTP with no authentication,
//! which is why it listens on loopback unless told otherwise.

use std::io::{BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap};
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The secret an export presents as `Authorization: Bearer <token>`.
pub struct Token(Vec<u8>);

impl Token {
    /// `value` as a token: at least one character, all visible ASCII (what
    /// an HTTP header can carry without quoting).
    pub fn new(value: &str) -> Result<Token, String> {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a bearer token is one or more visible ASCII characters, no spaces".into());
        }
        Ok(Token(value.as_bytes().to_vec()))
    }

    /// The token in `path`, without the whitespace around it (the newline
    /// an editor leaves). Cost: one file read.
    pub fn from_file(path: &Path) -> Result<Token, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the bearer token {}: {e}", path.display()))?;
        Token::new(text.trim()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether `headers` carry this token. The scheme is matched without
    /// regard to case (RFC 7235); the token is compared in time that does
    /// not depend on where it differs, so a client cannot find it by
    /// timing guesses (its length is not hidden).
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let value = value.as_bytes();
        let Some((scheme, given)) = value.split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(given.ct_eq(&self.0))
    }
}

/// The TLS configuration for `cert` (a PEM chain, leaf first) and `key`
/// (a PEM private key: PKCS#8, PKCS#1 or SEC1). The key file is refused
/// if group or others may read or write it, unless `allow_readable`, by
/// the rule the log applies to its own key files. Cost: two file reads.
pub fn server_config(
    cert: &Path,
    key: &Path,
    allow_readable: bool,
) -> Result<Arc<ServerConfig>, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading the certificate {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no PEM certificate in it", cert.display()));
    }
    let private = read_private_key(key, allow_readable)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, private))
        .map_err(|e| format!("{} with {}: {e}", cert.display(), key.display()))?;
    // The server speaks HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The private key in `path`, its mode checked on the file it is read
/// from (no window between the check and the read).
fn read_private_key(path: &Path, allow_readable: bool) -> Result<PrivateKeyDer<'static>, String> {
    let named = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| named(&e))?;
    if let Some(mode) = exposed_mode(&file).map_err(|e| named(&e))?
        && !allow_readable
    {
        let problem = ringwal::KeyProblem::Exposed { mode };
        return Err(named(&format_args!("{problem} (--allow-readable-key)")));
    }
    let mut pem = Vec::new();
    BufReader::new(file)
        .read_to_end(&mut pem)
        .map_err(|e| named(&e))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| named(&format_args!("no PEM private key: {e}")))
}

/// The mode of `file` when its group or others may read, write or run
/// it, `None` when only its owner may: the rule the log applies to its
/// key files (`StaticKeys::from_key_file`), as OpenSSH applies it to a
/// private key. Checked on the open file, so that what is checked is
/// what is read. Cost: one `fstat`.
fn exposed_mode(file: &std::fs::File) -> std::io::Result<Option<u32>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = file.metadata()?.permissions().mode() & 0o7777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes done, not yet taken by the server.
const READY_QUEUE: usize = 64;

/// A listener that hands the server TLS streams. Connections are accepted
/// and their handshakes run on tasks of their own, so a slow or silent
/// client holds up nobody; one whose handshake fails (plain HTTP, an
/// unknown CA) or does not finish in [`HANDSHAKE_TIMEOUT`] is closed
/// without a reply. Dropping it stops accepting.
pub struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    /// TLS with `config` on the connections of `tcp`. Spawns one task, and
    /// one per connection until its handshake ends.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<TlsListener> {
        let addr = tcp.local_addr()?;
        let (done, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        let accepting = tokio::spawn(async move {
            let mut tcp = tcp;
            loop {
                // axum's own accept: it retries failed accepts.
                let (stream, peer) = axum::serve::Listener::accept(&mut tcp).await;
                let (acceptor, done) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    let shake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    if let Ok(Ok(tls)) = shake.await {
                        let _ = done.send((tls, peer)).await;
                    }
                });
            }
        });
        Ok(TlsListener {
            addr,
            ready,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task holds a sender for as long as it runs,
            // and it runs until this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}
