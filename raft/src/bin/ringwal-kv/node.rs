//! One ringwal-kv node: an openraft `Raft` on a ringwal `LogStore` (or,
//! to measure against, the in-memory `MemLogStore`) and the in-memory
//! `KvStateMachine`, its HTTP API (axum), the HTTP network to the other
//! nodes (reqwest), and the client calls. Shared by the `ringwal-kv`
//! binary (one node per process) and the tests (`tests/raft/kv_cluster.rs`
//! runs three nodes in one process).
//!
//! Every endpoint is open unless a token is set ([`Tokens`]): the raft
//! RPCs (`/raft/append`, `/raft/vote`, `/raft/snapshot`) then need the
//! cluster token, which the node also sends on its own RPCs, and the
//! client endpoints (`/init`, `/kv/*`, `/metrics`) the client token, or
//! the cluster token when no client token is set. A token travels as
//! `Authorization: Bearer <token>`, in the clear: the HTTP is plain.

// Not every item is used by both the binary and the test.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::error::Error;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::error::{
    CheckIsLeaderError, InitializeError, InstallSnapshotError, NetworkError, PayloadTooLarge,
    RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, LogId, RaftMetrics, SnapshotPolicy};
use ringwal_raft::{
    BatchLimits, KvConfig, KvRequest, KvStateMachine, LogStore, MemLogStore, OpenError, Proposer,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Any error, for the example's own plumbing.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// The openraft instance of one node.
pub type Raft = openraft::Raft<KvConfig>;

/// A running node: its raft, a handle on its state machine, where it
/// listens, what its log store recovered, and the HTTP server task.
pub struct Node {
    pub id: u64,
    pub raft: Raft,
    pub sm: KvStateMachine,
    pub addr: SocketAddr,
    /// The last log id the log store held when it was opened, before
    /// openraft or any other node touched it (purged entries count);
    /// `None` on the memory store.
    pub recovered: Option<LogId<u64>>,
    server: JoinHandle<()>,
}

impl Node {
    /// Stop the HTTP server and the raft node; its log store is dropped
    /// (and the ringwal log closed) once the raft tasks are gone.
    pub async fn stop(self) {
        self.server.abort();
        let _ = self.server.await;
        let _ = self.raft.shutdown().await;
    }
}

/// When a node builds a snapshot and how much log it keeps behind it.
#[derive(Clone, Copy, Debug)]
pub struct Snapshots {
    /// Build a snapshot every this many applied entries.
    pub every: u64,
    /// Keep this many entries in the log behind the last snapshot (a
    /// follower further behind is sent the snapshot).
    pub keep: u64,
}

/// Which log store a node keeps its raft log in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Store {
    /// `ringwal_raft::LogStore` in the node's directory, with its
    /// snapshots durably beside it.
    #[default]
    Ringwal,
    /// `ringwal_raft::MemLogStore` and a state machine with no snapshot
    /// file: nothing on disk, nothing survives a restart (not even the
    /// vote). The same service without durability, to measure against.
    Memory,
}

impl Default for Snapshots {
    /// Every 50 entries, keeping 20: so that the log store's purge runs in
    /// any real use.
    fn default() -> Self {
        Snapshots {
            every: 50,
            keep: 20,
        }
    }
}

/// The largest request body a node accepts. Raft messages are JSON, and
/// JSON writes a byte array as a list of numbers (up to 4 characters a
/// byte): a snapshot chunk of [`SNAPSHOT_CHUNK`] bytes is at most about
/// 4 MiB on the wire, an append of openraft's default 300 entries of the
/// log's largest record (256 KiB) about 300 MiB. axum's default of 2 MiB
/// refused every snapshot chunk of a state past about 600 KiB, so a node
/// that needed a snapshot never caught up; an append too large for this
/// limit is answered 413, which the sender turns into openraft's
/// `PayloadTooLarge`, and openraft sends fewer entries.
pub const RPC_BODY_LIMIT: usize = 64 << 20;

/// How many snapshot bytes one `install_snapshot` request carries: small
/// enough that its JSON stays far below [`RPC_BODY_LIMIT`].
pub const SNAPSHOT_CHUNK: u64 = 1 << 20;

const _: () = assert!(4 * SNAPSHOT_CHUNK as usize + (64 << 10) < RPC_BODY_LIMIT);

/// Timings short enough for a test on loopback, long enough for a
/// loaded 2-core machine; 10 s for a snapshot chunk.
fn raft_config(snapshots: Snapshots) -> Result<Arc<openraft::Config>, BoxError> {
    let cfg = openraft::Config {
        cluster_name: "ringwal-kv".into(),
        heartbeat_interval: 100,
        election_timeout_min: 400,
        election_timeout_max: 800,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshots.every),
        max_in_snapshot_log_to_keep: snapshots.keep,
        // Each snapshot chunk is one HTTP request, as JSON (a byte array
        // in JSON is a list of numbers): openraft's default of 200 ms is
        // too short for a chunk of a state of a few MiB on a loaded
        // machine, and a follower whose every chunk times out never
        // catches up.
        install_snapshot_timeout: 10_000,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK,
        ..Default::default()
    };
    Ok(Arc::new(cfg.validate()?))
}

/// The ringwal configuration of a node's log: 4 MiB segments.
fn wal_config() -> ringwal::Config {
    ringwal::Config::builder()
        .segment_bytes(4 << 20)
        .max_record_bytes(256 << 10)
        .build()
}

/// A shared secret a request presents as `Authorization: Bearer <token>`.
#[derive(Clone)]
pub struct Token(Arc<str>);

impl Token {
    /// `value` as a token: one or more visible ASCII characters (what a
    /// header carries as it is).
    pub fn new(value: &str) -> Result<Token, String> {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a token is one or more visible ASCII characters, no spaces".into());
        }
        Ok(Token(value.into()))
    }

    /// The token in the file at `path`, without the whitespace around it
    /// (the newline an editor leaves).
    pub fn from_file(path: &Path) -> Result<Token, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading the token {}: {e}", path.display()))?;
        Token::new(text.trim()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether `headers` carry this token. The comparison takes the same
    /// time wherever the token given differs, so a client cannot find it
    /// by timing guesses (its length is not hidden).
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let Some((scheme, given)) = value.as_bytes().split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(given.ct_eq(self.0.as_bytes()))
    }

    /// The `Authorization` header that presents it.
    fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

/// The tokens a node checks (and, the cluster token, sends). `None`
/// leaves that side open to anyone who can reach the node.
#[derive(Clone, Default)]
pub struct Tokens {
    /// Needed on the raft RPCs, and sent on every raft RPC this node
    /// makes to its peers: every member must have the same one.
    pub cluster: Option<Token>,
    /// Needed on the client endpoints (`/init`, `/kv/*`, `/metrics`);
    /// when `None`, the cluster token is needed there instead, if set.
    pub client: Option<Token>,
}

/// Start node `id` serving on `listener`, its log store in `dir`.
pub async fn start(id: u64, listener: TcpListener, dir: &Path) -> Result<Node, BoxError> {
    let tokens = Tokens::default();
    start_with(
        id,
        listener,
        dir,
        Snapshots::default(),
        Store::Ringwal,
        tokens,
    )
    .await
}

/// As [`start`], with its own snapshot policy, log store (`dir` is not
/// used by the memory store) and tokens.
pub async fn start_with(
    id: u64,
    listener: TcpListener,
    dir: &Path,
    snapshots: Snapshots,
    store: Store,
    tokens: Tokens,
) -> Result<Node, BoxError> {
    let addr = listener.local_addr()?;
    let cfg = raft_config(snapshots)?;
    let network = Network {
        client: reqwest::Client::new(),
        token: tokens.cluster.clone(),
    };
    let (raft, sm, recovered) = match store {
        Store::Ringwal => {
            let mut log = open_store(dir).await?;
            let recovered = log.get_log_state().await?.last_log_id;
            // Snapshots are kept durably beside the log: once the log is
            // purged, a restart starts from the last snapshot, not from an
            // empty state.
            let sm = KvStateMachine::open(dir.join("snapshot"))?;
            let raft = Raft::new(id, cfg, network, log, sm.clone()).await?;
            (raft, sm, recovered)
        }
        Store::Memory => {
            let sm = KvStateMachine::new();
            let log = MemLogStore::<KvConfig>::new();
            (
                Raft::new(id, cfg, network, log, sm.clone()).await?,
                sm,
                None,
            )
        }
    };
    let api = Api {
        raft: raft.clone(),
        proposer: Proposer::spawn(raft.clone(), BatchLimits::default()),
        sm: sm.clone(),
    };
    let app = router(api, tokens);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Node {
        id,
        raft,
        sm,
        addr,
        recovered,
        server,
    })
}

/// The node's endpoints, each behind the token its side needs (checked
/// before the body is read, so a refused request never reaches raft).
fn router(api: Api, tokens: Tokens) -> Router {
    let raft_side = Guard {
        token: tokens.cluster.clone(),
        what: "cluster token (--cluster-token)",
    };
    let client_side = match tokens.client {
        Some(token) => Guard {
            token: Some(token),
            what: "client token (--client-token)",
        },
        None => Guard {
            what: "cluster token (--cluster-token; no --client-token is set)",
            ..raft_side.clone()
        },
    };
    let raft = Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .route_layer(middleware::from_fn_with_state(raft_side, require));
    let client = Router::new()
        .route("/init", post(init))
        .route("/kv/put", post(put))
        .route("/kv/get", get(read))
        .route("/kv/local", get(local))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(client_side, require));
    raft.merge(client)
        .layer(DefaultBodyLimit::max(RPC_BODY_LIMIT))
        .with_state(api)
}

/// The token one side of the API needs, and its name for the refusal.
#[derive(Clone)]
struct Guard {
    token: Option<Token>,
    what: &'static str,
}

/// Pass the request on if the guard's token is absent or presented;
/// otherwise 401, saying which token is missing.
async fn require(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    match &guard.token {
        Some(token) if !token.admits(req.headers()) => {
            let body = format!(
                "401: missing or wrong {}: send Authorization: Bearer <token>\n",
                guard.what
            );
            let mut refusal = (StatusCode::UNAUTHORIZED, body).into_response();
            refusal
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            refusal
        }
        _ => next.run(req).await,
    }
}

/// Open the log store, retrying for a while if the previous instance in
/// this process still holds the log (its raft tasks winding down).
async fn open_store(dir: &Path) -> Result<LogStore<KvConfig>, BoxError> {
    let mut tries = 0;
    loop {
        match LogStore::<KvConfig>::try_open(dir, wal_config()) {
            Ok(store) => return Ok(store),
            Err(OpenError::Wal(ringwal::Error::Locked { .. })) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[derive(Clone)]
struct Api {
    raft: Raft,
    /// Client writes go through it: those that arrive while others are in
    /// flight share a raft entry.
    proposer: Proposer,
    sm: KvStateMachine,
}

async fn append(
    State(api): State<Api>,
    Json(req): Json<AppendEntriesRequest<KvConfig>>,
) -> Json<Result<AppendEntriesResponse<u64>, RaftError<u64>>> {
    Json(api.raft.append_entries(req).await)
}

async fn vote(
    State(api): State<Api>,
    Json(req): Json<VoteRequest<u64>>,
) -> Json<Result<VoteResponse<u64>, RaftError<u64>>> {
    Json(api.raft.vote(req).await)
}

async fn snapshot(
    State(api): State<Api>,
    Json(req): Json<InstallSnapshotRequest<KvConfig>>,
) -> Json<Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>> {
    Json(api.raft.install_snapshot(req).await)
}

/// The members to initialize the cluster with: node id -> address.
pub type Members = BTreeMap<u64, BasicNode>;

async fn init(
    State(api): State<Api>,
    Json(members): Json<Members>,
) -> Json<Result<(), RaftError<u64, InitializeError<u64, BasicNode>>>> {
    Json(api.raft.initialize(members).await)
}

/// What `/kv/put` answers: the leader's reply once the entry carrying the
/// command is applied (this command's reply alone), or why not
/// (`ForwardToLeader` names the leader when it is known).
pub type PutResult = ringwal_raft::WriteResult;

async fn put(State(api): State<Api>, Json(req): Json<KvRequest>) -> Json<PutResult> {
    Json(api.proposer.write(req).await)
}

#[derive(Serialize, Deserialize)]
struct Key {
    key: String,
}

type GetResult = Result<Option<String>, RaftError<u64, CheckIsLeaderError<u64, BasicNode>>>;

/// A linearizable read: only the leader answers, once it has confirmed
/// its leadership and applied everything committed before the read.
async fn read(State(api): State<Api>, Query(key): Query<Key>) -> Json<GetResult> {
    Json(
        api.raft
            .ensure_linearizable()
            .await
            .map(|_| api.sm.get(&key.key)),
    )
}

/// What `/kv/local` answers: this node's applied state.
#[derive(Debug, Serialize, Deserialize)]
pub struct LocalState {
    /// The last entry applied.
    pub last_applied: Option<LogId<u64>>,
    /// Every key and its value.
    pub kv: BTreeMap<String, String>,
}

/// A local read of the whole applied state: no leader involved, so it
/// shows exactly what this node's state machine holds (it can lag).
async fn local(State(api): State<Api>) -> Json<LocalState> {
    let (last_applied, kv) = api.sm.read_all();
    Json(LocalState { last_applied, kv })
}

async fn metrics(State(api): State<Api>) -> Json<RaftMetrics<u64, BasicNode>> {
    Json(api.raft.metrics().borrow().clone())
}

/// The HTTP network: one reqwest client shared by every connection, and
/// the cluster token every raft RPC carries.
pub struct Network {
    client: reqwest::Client,
    token: Option<Token>,
}

/// A "connection" to one node: its id and address.
pub struct Conn {
    client: reqwest::Client,
    token: Option<Token>,
    target: u64,
    addr: String,
}

impl RaftNetworkFactory<KvConfig> for Network {
    type Network = Conn;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Conn {
        Conn {
            client: self.client.clone(),
            token: self.token.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

impl Conn {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
        entries_hint: u64,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let url = format!("http://{}/{path}", self.addr);
        let resp = with_token(self.client.post(url), &self.token)
            .timeout(option.hard_ttl())
            .json(req)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
        // A refusal before the handler (a body over the limit, a bad
        // request) is not a raft reply: say what the node answered, so
        // that openraft and whoever reads its log see the cause, not a
        // JSON decoding error.
        let status = resp.status();
        if status == reqwest::StatusCode::PAYLOAD_TOO_LARGE {
            // An append: openraft retries with at most `entries_hint`
            // entries. A snapshot chunk: it gives up on this attempt.
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(entries_hint),
            ));
        }
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            let e = std::io::Error::other(format!("{} answered {status}: {body}", self.addr));
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let res: Result<Resp, RaftError<u64, E>> = resp
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<KvConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KvConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        // Refused as too large: half as many entries next time.
        let hint = (rpc.entries.len() as u64 / 2).max(1);
        self.call("raft/append", &rpc, &option, hint).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<KvConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.call("raft/snapshot", &rpc, &option, 1).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call("raft/vote", &rpc, &option, 1).await
    }
}

/// The client side: calls to a node's HTTP API, following the leader,
/// with the client token if there is one.
pub struct Client {
    http: reqwest::Client,
    token: Option<Token>,
}

impl Default for Client {
    fn default() -> Self {
        Client::with_token(None)
    }
}

/// `req` with `Authorization: Bearer <token>`, if there is a token.
fn with_token(req: reqwest::RequestBuilder, token: &Option<Token>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => req.header(header::AUTHORIZATION, t.bearer()),
        None => req,
    }
}

/// A node's JSON answer, or, refused for want of a token (401), what it
/// said: an error to report, not to retry.
async fn reply<T: DeserializeOwned>(resp: reqwest::Response) -> Result<T, BoxError> {
    if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
        let said = resp.text().await.unwrap_or_default();
        return Err(said.trim_end().to_string().into());
    }
    Ok(resp.json().await?)
}

/// How long a client call keeps retrying while there is no leader.
const RETRY_FOR: Duration = Duration::from_secs(20);

impl Client {
    /// A client that presents `token` (a 5 s timeout per request).
    pub fn with_token(token: Option<Token>) -> Client {
        Client {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("a reqwest client"),
            token,
        }
    }

    fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        with_token(self.http.request(method, url), &self.token)
    }

    /// Initialize the cluster through the node at `addr` with `members`.
    pub async fn init(&self, addr: &str, members: &Members) -> Result<(), BoxError> {
        let url = format!("http://{addr}/init");
        let resp = self
            .request(reqwest::Method::POST, url)
            .json(members)
            .send()
            .await?;
        let res: Result<(), RaftError<u64, InitializeError<u64, BasicNode>>> = reply(resp).await?;
        Ok(res?)
    }

    /// Set `key` to `value`, starting at the node at `addr` and following
    /// the leader it names. Returns the previous value.
    pub async fn put(
        &self,
        addr: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<String>, BoxError> {
        let req = KvRequest::Set {
            key: key.into(),
            value: value.into(),
        };
        let mut at = addr.to_string();
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        loop {
            let url = format!("http://{at}/kv/put");
            let sent = self
                .request(reqwest::Method::POST, url)
                .json(&req)
                .send()
                .await;
            let res: PutResult = match sent {
                Ok(r) => reply(r).await?,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    let _ = e;
                    at = addr.to_string();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match res {
                Ok(resp) => return Ok(resp.data.previous),
                Err(e) if tokio::time::Instant::now() < deadline => {
                    at = follow(&e, &at).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A linearizable read of `key`, starting at the node at `addr` and
    /// following the leader it names.
    pub async fn get(&self, addr: &str, key: &str) -> Result<Option<String>, BoxError> {
        let mut at = addr.to_string();
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        loop {
            let url = format!("http://{at}/kv/get");
            let sent = self
                .request(reqwest::Method::GET, url)
                .query(&[("key", key)])
                .send()
                .await;
            let res: GetResult = match sent {
                Ok(r) => reply(r).await?,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    let _ = e;
                    at = addr.to_string();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match res {
                Ok(v) => return Ok(v),
                Err(e) if tokio::time::Instant::now() < deadline => {
                    at = follow(&e, &at).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The metrics of the node at `addr`.
    pub async fn metrics(&self, addr: &str) -> Result<RaftMetrics<u64, BasicNode>, BoxError> {
        let url = format!("http://{addr}/metrics");
        reply(self.request(reqwest::Method::GET, url).send().await?).await
    }
}

/// Where to retry after `e` from the node at `at`: the leader it names,
/// or (no leader known yet) the same node after a pause.
async fn follow<E>(e: &RaftError<u64, E>, at: &str) -> String
where
    E: Error + openraft::TryAsRef<openraft::error::ForwardToLeader<u64, BasicNode>>,
{
    match e.forward_to_leader::<BasicNode>() {
        Some(f) if f.leader_node.is_some() => f.leader_node.as_ref().unwrap().addr.clone(),
        _ => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            at.to_string()
        }
    }
}
