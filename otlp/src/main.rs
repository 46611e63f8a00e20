//! `ringwal-otlp`: an OTLP/HTTP receiver that keeps every export body in a
//! ringwal log before it answers 200, and publishes the bodies as blocks,
//! `OUT/<traces|metrics|logs>/<first>-<watermark>.pb`, files in a
//! directory or objects in a store. After a crash it replays what no
//! block covers, so every acknowledged body reaches a block (at least
//! once).

mod access;
mod bench;
mod blocks;
mod receiver;
mod server;
mod signal;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use ringwal::Level;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio_rustls::rustls::ServerConfig;

use crate::access::{TlsListener, Token};
use crate::blocks::{Out, Sealing};
use crate::receiver::{Options, Receiver};
use crate::server::{App, Sink};

#[derive(Parser, Debug)]
#[command(
    name = "ringwal-otlp",
    version,
    about = "An OTLP/HTTP receiver that keeps every export body in a ringwal log before it answers, and publishes the bodies as blocks.",
    long_about = None,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Exporters post binary protobuf to http://HOST:PORT/v1/traces, /v1/metrics and /v1/logs \
(https:// with --tls-cert and --tls-key; gzip or deflate Content-Encoding accepted). A 200 means \
the body is in the log at --level. Without --bearer-token anyone who can reach the port can \
export, and without TLS the bodies and the token travel in the clear: the default address is \
loopback for that reason. \
SIGTERM or SIGINT: stop accepting, answer what is in flight, publish every body held, exit 0."
)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address to listen on: loopback unless told otherwise (0.0.0.0:4318
    /// for every interface; then set a token, and TLS).
    #[arg(long, default_value = "127.0.0.1:4318", value_name = "HOST:PORT")]
    listen: String,
    /// Require `Authorization: Bearer TOKEN` on every export (401 without
    /// it, nothing stored). A flag shows in `ps`: prefer
    /// --bearer-token-file.
    #[arg(long, value_name = "TOKEN", conflicts_with = "bearer_token_file")]
    bearer_token: Option<String>,
    /// As --bearer-token, read from FILE (the whitespace around it
    /// ignored).
    #[arg(long, value_name = "FILE")]
    bearer_token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs
    /// --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM). Refused if group or others may
    /// read or write the file.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Accept a --tls-key file that group or others may read or write (a
    /// secrets mount whose modes cannot be made private).
    #[arg(long, requires = "tls_key")]
    allow_readable_key: bool,
    /// The log's directory (created if missing).
    #[arg(long, required = true, value_name = "DIR")]
    wal: Option<PathBuf>,
    /// Where blocks are published: a directory (DIR/traces, DIR/metrics,
    /// DIR/logs, each block a file) or an object store URL, file:///DIR or
    /// s3://BUCKET/PREFIX (each block an object under PREFIX/traces/ and
    /// so on, published once the store acknowledged it). S3 settings come
    /// from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY. The store must answer at the start; an
    /// outage later holds the blocks (and the log keeps their bodies)
    /// until it ends.
    #[arg(long, required = true, value_name = "DIR|URL")]
    out: Option<PathBuf>,
    /// The S3 endpoint, e.g. http://127.0.0.1:3900, instead of
    /// AWS_ENDPOINT_URL (an s3:// --out only).
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// The S3 region, instead of AWS_REGION (an s3:// --out only).
    #[arg(long, value_name = "NAME")]
    s3_region: Option<String>,
    /// When a body is acknowledged: once written (survives a crash of this
    /// process; the log syncs every 100 ms, which bounds what a power loss
    /// can take) or once durable (on stable storage).
    #[arg(long, value_enum, default_value_t = AckLevel::Written)]
    level: AckLevel,
    /// Seal a signal's block once it holds this many bytes.
    #[arg(long, default_value_t = 4 << 20, value_name = "N")]
    block_bytes: usize,
    /// Seal a signal's block once its oldest body is this old.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    block_age_ms: u64,
    /// The largest body accepted, compressed or not (413 past it).
    #[arg(long, default_value_t = 4 << 20, value_name = "N")]
    max_body_bytes: usize,
    /// Size of the log's segment files.
    #[arg(long, default_value_t = 64 << 20, value_name = "N")]
    segment_bytes: u64,
    /// The log's size limit: past it bodies are refused with 503 and
    /// Retry-After until published blocks let the log drop segments.
    #[arg(long, default_value_t = 1 << 30, value_name = "N")]
    max_log_bytes: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AckLevel {
    Written,
    Durable,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Export bodies per second and latency of the 200, on the log at
    /// written and at durable, against a file written with fdatasync per
    /// body; a Markdown table of medians on stdout.
    Bench {
        /// Where the runs' scratch directories go (a real disk, not tmpfs).
        #[arg(long, default_value = ".", value_name = "DIR")]
        dir: PathBuf,
        /// Body sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "1024,65536,1048576")]
        sizes: Vec<usize>,
        /// Concurrent exporters, one connection each.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Seconds measured per run, after a warm-up of half a second.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Runs per sink and size; the report gives medians.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Bench {
            dir,
            sizes,
            clients,
            seconds,
            runs,
        }) => bench::run(&bench::Plan {
            dir,
            sizes,
            clients: clients.max(1),
            warmup: Duration::from_millis(500),
            measure: Duration::from_secs_f64(seconds.max(0.1)),
            runs: runs.max(1),
        })
        .map(|()| true),
        None => serve(cli.serve),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ringwal-otlp: {e}");
            ExitCode::FAILURE
        }
    }
}

impl ServeArgs {
    fn options(&self) -> Result<Options, String> {
        let (Some(wal), Some(out)) = (self.wal.clone(), self.out.as_deref()) else {
            return Err("--wal and --out are required".into());
        };
        let mut out = Out::parse(out);
        if self.s3_endpoint.is_some() || self.s3_region.is_some() {
            match &mut out {
                Out::Url { url, s3 } if url.starts_with("s3://") => {
                    s3.endpoint.clone_from(&self.s3_endpoint);
                    s3.region.clone_from(&self.s3_region);
                }
                _ => {
                    return Err(format!(
                        "--s3-endpoint and --s3-region need an s3:// --out, not {out}"
                    ))
                }
            }
        }
        Ok(Options {
            wal,
            out,
            level: match self.level {
                AckLevel::Written => Level::Written,
                AckLevel::Durable => Level::Durable,
            },
            sealing: Sealing {
                bytes: self.block_bytes.max(1),
                age: Duration::from_millis(self.block_age_ms),
            },
            max_body: self.max_body_bytes,
            segment_bytes: self.segment_bytes,
            max_log_bytes: self.max_log_bytes,
        })
    }
}

/// Who may export and over what, from the flags: read and checked before
/// the log is opened.
struct Access {
    token: Option<Token>,
    tls: Option<Arc<ServerConfig>>,
}

impl ServeArgs {
    fn access(&self) -> Result<Access, String> {
        let token = match (&self.bearer_token, &self.bearer_token_file) {
            (Some(t), _) => Some(Token::new(t).map_err(|e| format!("--bearer-token: {e}"))?),
            (None, Some(path)) => Some(Token::from_file(path)?),
            (None, None) => None,
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                Some(access::server_config(cert, key, self.allow_readable_key)?)
            }
            _ => None,
        };
        Ok(Access { token, tls })
    }
}

/// Serve until SIGTERM or SIGINT (then drain and return `Ok(true)`) or
/// until the log fails (`Ok(false)`).
fn serve(args: ServeArgs) -> Result<bool, String> {
    let Access { token, tls } = args.access()?;
    let opts = args.options()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    rt.block_on(async move {
        let max_body = opts.max_body;
        let (receiver, started) = tokio::task::spawn_blocking(move || Receiver::open(&opts))
            .await
            .map_err(|e| e.to_string())??;
        if started.replayed > 0 || started.fillers > 0 {
            eprintln!(
                "ringwal-otlp: replayed {} bodies no block covered into {} blocks ({} LSNs burnt)",
                started.replayed, started.blocks, started.fillers
            );
        }
        let listener = TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("listening on {}: {e}", args.listen))?;
        let (fatal, fatal_rx) = watch::channel(false);
        let app = Arc::new(App {
            sink: Sink::Log(receiver),
            max_body,
            token,
            fatal,
        });
        let stop = stop_signal(fatal_rx)?;
        let router = server::router(app.clone());
        let served = match tls {
            None => run(listener, router, stop).await,
            Some(config) => {
                let listener = TlsListener::new(listener, config).map_err(|e| e.to_string())?;
                run(listener, router, stop).await
            }
        };
        served.map_err(|e| format!("serving: {e}"))?;
        let app = server::into_app(app).await?;
        let healthy = !*app.fatal.borrow();
        if let Sink::Log(receiver) = app.sink {
            tokio::task::spawn_blocking(move || receiver.finish())
                .await
                .map_err(|e| e.to_string())??;
        }
        Ok(healthy)
    })
}

/// Say where it listens, then serve until `stop`, plain or TLS alike.
async fn run<L>(
    listener: L,
    router: axum::Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    println!("listening on {}", listener.local_addr()?);
    let _ = std::io::stdout().flush();
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
}

/// Resolves on SIGTERM, SIGINT, or once the log has failed.
fn stop_signal(
    mut fatal: watch::Receiver<bool>,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, String> {
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = fatal.wait_for(|f| *f) => {
                eprintln!("ringwal-otlp: the log failed; stopping");
            }
        }
    })
}
