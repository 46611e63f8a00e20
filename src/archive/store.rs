//! Where an archive lives: an `object_store` client for a URL, with
//! blocking calls on a runtime of the caller's thread, and the names of
//! a node's objects under the archive's prefix.

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use ringwal_platform::{RealFs, Vfs};

use crate::at_rest::format;
use crate::error::{ArchiveProblem, Error, Lsn, Result};

/// Bytes of one ranged GET when an object is fetched in parallel
/// (`get_prefix`): eight requests in flight for a 64 MiB segment, each
/// large enough that its per-request cost is noise.
const FETCH_CHUNK: usize = 8 << 20;

/// Retries of one S3 request by the client itself, and how long they may
/// take in all. The client's defaults (10 retries over up to 3 minutes)
/// held an archiver's pass, its stop and a receiver's start for minutes
/// while the store was down; the callers retry on their own schedule
/// (the archiver's backoff, the standby's interval), so a request gives
/// up after a few short tries and reports `Unreachable`.
const S3_RETRIES: usize = 3;
/// See [`S3_RETRIES`].
const S3_RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// How to reach an S3-compatible store, beyond what the URL says. Each
/// field left `None` is taken from the usual AWS environment variables
/// (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`), as the AWS tools do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The endpoint, e.g. `http://127.0.0.1:3900` for a local server.
    pub endpoint: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// The access key id.
    pub access_key_id: Option<String>,
    /// The secret access key.
    pub secret_access_key: Option<String>,
}

/// A place in an object store (`file:///dir` or `s3://bucket/prefix`),
/// with blocking calls: what the archive ships to, and what a layer
/// publishing objects of its own (the OTLP receiver's blocks) writes
/// through, so that both reach a store the same way.
///
/// Each call runs on a runtime of the handle's own (no thread is
/// started): call it from a thread that may block, never from inside an
/// async task.
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    /// The URL up to the prefix, for naming objects in errors.
    url: String,
    prefix: String,
    rt: tokio::runtime::Runtime,
    /// A `file://` store's directory and the modes its directories and
    /// objects get: the log's, so that a copy of it is no more readable
    /// than the log itself (`object_store` leaves the umask's).
    local: Option<Local>,
}

/// Where a `file://` store keeps its objects, and with which modes.
#[derive(Clone, Debug)]
struct Local {
    root: std::path::PathBuf,
    file_mode: u32,
    dir_mode: u32,
}

/// An object read whole, or word that there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Got {
    /// Its bytes.
    Bytes(Vec<u8>),
    /// The store has no such object.
    Missing,
}

impl Store {
    /// A client for `url`: `file:///absolute/dir` (created if missing)
    /// or `s3://bucket[/prefix]`, S3 settings from `opts`, then from the
    /// environment. Cost: a runtime of the calling thread's own (no
    /// thread is started); for S3, no request yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a URL of another shape; `Io` when a
    /// local directory cannot be made.
    pub fn open(url: &str, opts: &StoreOptions) -> Result<Store> {
        let bad = |why: &str| Error::InvalidConfig(format!("archive URL {url}: {why}"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("the archive's runtime", e))?;
        let mut local = None;
        let (inner, url, prefix): (Arc<dyn ObjectStore>, String, String) =
            if let Some(path) = url.strip_prefix("file://") {
                if !path.starts_with('/') {
                    return Err(bad("a file URL needs an absolute path (file:///dir)"));
                }
                RealFs
                    .create_dir_all(std::path::Path::new(path), 0o700)
                    .map_err(|e| Error::io(path, e))?;
                // Synced, so that a put's `Ok` means what an S3 PUT's
                // acknowledgement does: a power loss keeps the object.
                // Callers drop what they shipped once a put returns.
                let fs = LocalFileSystem::new_with_prefix(path)
                    .map_err(|e| bad(&e.to_string()))?
                    .with_automatic_cleanup(true)
                    .with_fsync(true);
                local = Some(Local {
                    root: std::path::PathBuf::from(path),
                    file_mode: 0o600,
                    dir_mode: 0o700,
                });
                (
                    Arc::new(fs),
                    format!("file://{}", path.trim_end_matches('/')),
                    String::new(),
                )
            } else if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket"));
                }
                let s3 = s3_builder(bucket, opts)
                    .build()
                    .map_err(|e| bad(&e.to_string()))?;
                let prefix = prefix.trim_matches('/').to_string();
                (Arc::new(s3), format!("s3://{bucket}"), prefix)
            } else {
                return Err(bad("the scheme is not file:// or s3://"));
            };
        Ok(Store {
            inner,
            url,
            prefix,
            rt,
            local,
        })
    }

    /// A client for reading the archive of `node` at `url` (restore,
    /// follow, list): as [`open`](Self::open), except that a `file://`
    /// directory that does not exist is not made, since nothing will be
    /// written there: it holds no archive, which is
    /// [`ArchiveProblem::NoArchive`] naming the node's archive manifest.
    /// Cost: as `open`, and a `stat(2)` of a local directory.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open), and `NoArchive` as above.
    pub(crate) fn open_to_read(url: &str, opts: &StoreOptions, node: u32) -> Result<Store> {
        if let Some(path) = url.strip_prefix("file://")
            && path.starts_with('/')
            && !std::path::Path::new(path).exists()
        {
            let manifest = Names::new(node).manifest();
            return Err(Error::Archive {
                object: format!("{}/{manifest}", url.trim_end_matches('/')),
                problem: ArchiveProblem::NoArchive,
                source: None,
            });
        }
        Store::open(url, opts)
    }

    /// The same store, giving the directories and objects it makes in a
    /// `file://` store the permission bits `file_mode` and `dir_mode` (a
    /// log's, `Config::file_mode` and `Config::dir_mode`) instead of the
    /// defaults, 0600 and 0700. Nothing for an S3 store.
    pub(crate) fn with_modes(mut self, file_mode: u32, dir_mode: u32) -> Store {
        if let Some(l) = &mut self.local {
            (l.file_mode, l.dir_mode) = (file_mode, dir_mode);
        }
        self
    }

    /// The object `rel` under the prefix.
    fn path(&self, rel: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// The object `rel` (a `/`-separated name under the prefix) as a
    /// URL, for messages.
    pub fn url_of(&self, rel: &str) -> String {
        format!("{}/{}", self.url, self.path(rel))
    }

    /// Store `bytes` as `rel`, whole or not at all (a single PUT; the
    /// local store writes a temporary file, syncs it, renames it and
    /// syncs the directory, then gives it the log's file mode), replacing
    /// any object of that name; durable once it returns `Ok`. Cost: one
    /// request carrying the bytes (for a local store: two fsyncs, a
    /// `stat(2)` per directory level and a `chmod(2)`).
    ///
    /// # Errors
    ///
    /// [`Error::Archive`] naming the object: `Unreachable` (retry),
    /// `Refused`, `Missing` (no such bucket).
    pub fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(rel);
        // A local store's directories made first, with the log's mode, so
        // that the object never lies in one others may enter.
        let file = self.local.as_ref().map(|l| (l, l.root.join(path.as_ref())));
        if let Some((l, file)) = &file
            && let Some(parent) = file.parent()
        {
            RealFs
                .create_dir_all(parent, l.dir_mode)
                .map_err(|e| Error::io(parent, e))?;
        }
        self.rt
            .block_on(self.inner.put(&path, PutPayload::from(bytes)))
            .map_err(|e| self.error(rel, e))?;
        if let Some((l, file)) = &file {
            ringwal_platform::file::set_mode_at(file, l.file_mode)
                .map_err(|e| Error::io(file, e))?;
        }
        Ok(())
    }

    /// The whole of `rel`, or `Missing`. Cost: one request.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub fn get(&self, rel: &str) -> Result<Got> {
        let path = self.path(rel);
        let got = self.rt.block_on(async {
            match self.inner.get(&path).await {
                Ok(r) => r.bytes().await.map(|b| Some(b.to_vec())),
                // S3 answers a request into a bucket that does not exist
                // with the same 404 as for a missing object: taken for "no
                // manifest yet", it would start a new archive there (and
                // lower the log's archive point) before the first PUT
                // failed. It is an error naming the URL.
                Err(e @ object_store::Error::NotFound { .. })
                    if e.to_string().contains("NoSuchBucket") =>
                {
                    Err(e)
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        match got {
            Ok(Some(b)) => Ok(Got::Bytes(b)),
            Ok(None) => Ok(Got::Missing),
            Err(e) => Err(self.error(rel, e)),
        }
    }

    /// The first `len` bytes of `rel`, fetched as ranges of
    /// `FETCH_CHUNK` all in flight at once: one request at a time leaves
    /// a disk or a network path mostly idle (a 64 MiB object read from a
    /// cold local store in one request ran at ~150 MB/s). An object
    /// shorter than `len` is `Damaged`, naming its length. Cost: one
    /// request per chunk, `len` bytes allocated once.
    pub(crate) fn get_prefix(&self, rel: &str, len: u64) -> Result<Vec<u8>> {
        let path = self.path(rel);
        let starts: Vec<u64> = (0..len).step_by(FETCH_CHUNK).collect();
        let got = self.rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (i, &start) in starts.iter().enumerate() {
                let (store, path) = (self.inner.clone(), path.clone());
                let end = (start + FETCH_CHUNK as u64).min(len);
                set.spawn(async move { (i, store.get_range(&path, start..end).await) });
            }
            let mut parts: Vec<Option<_>> = starts.iter().map(|_| None).collect();
            while let Some(joined) = set.join_next().await {
                match joined {
                    Ok((i, Ok(b))) => parts[i] = Some(b),
                    Ok((_, Err(e))) => return Err(e),
                    Err(e) => {
                        return Err(object_store::Error::Generic {
                            store: "archive",
                            source: Box::new(e),
                        })
                    }
                }
            }
            Ok(parts)
        });
        match got {
            Ok(parts) => {
                let mut out = Vec::with_capacity(len as usize);
                for p in parts.iter().flatten() {
                    out.extend_from_slice(p);
                }
                if out.len() as u64 != len {
                    return Err(self.short(rel, out.len() as u64, len));
                }
                Ok(out)
            }
            Err(object_store::Error::NotFound { .. }) => {
                Err(self.problem(rel, ArchiveProblem::Missing))
            }
            Err(e) => match self.rt.block_on(self.inner.head(&path)) {
                Ok(meta) if meta.size < len => Err(self.short(rel, meta.size, len)),
                _ => Err(self.error(rel, e)),
            },
        }
    }

    fn short(&self, rel: &str, have: u64, want: u64) -> Error {
        self.problem(
            rel,
            ArchiveProblem::Damaged(format!("{have} bytes, the archive manifest says {want}")),
        )
    }

    /// The whole of `rel`; a missing object is an error naming it
    /// (`Missing`). Cost: one request.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub fn get_existing(&self, rel: &str) -> Result<Vec<u8>> {
        match self.get(rel)? {
            Got::Bytes(b) => Ok(b),
            Got::Missing => Err(self.problem(rel, ArchiveProblem::Missing)),
        }
    }

    /// When `rel` was last replaced, or `None` if it is not there.
    /// Cost: one HEAD request.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub fn modified(&self, rel: &str) -> Result<Option<std::time::SystemTime>> {
        let path = self.path(rel);
        match self.rt.block_on(self.inner.head(&path)) {
            Ok(meta) => Ok(Some(meta.last_modified.into())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(rel, e)),
        }
    }

    /// The names of the objects directly under `dir` (a `/`-separated
    /// name under the prefix; "" for the prefix itself), relative to
    /// `dir`, sorted. Cost: one LIST request per thousand names.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub fn list(&self, dir: &str) -> Result<Vec<String>> {
        let path = if dir.is_empty() {
            (!self.prefix.is_empty()).then(|| ObjectPath::from(self.prefix.as_str()))
        } else {
            Some(self.path(dir))
        };
        let listed = self
            .rt
            .block_on(self.inner.list_with_delimiter(path.as_ref()))
            .map_err(|e| self.error(dir, e))?;
        let mut names: Vec<String> = listed
            .objects
            .iter()
            .filter_map(|o| o.location.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Remove `rel`; one that is not there is no error. Cost: one request.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub fn delete(&self, rel: &str) -> Result<()> {
        let path = self.path(rel);
        match self.rt.block_on(self.inner.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(rel, e)),
        }
    }

    /// `problem` with `rel`, as the error a caller reports.
    pub(crate) fn problem(&self, rel: &str, problem: ArchiveProblem) -> Error {
        Error::Archive {
            object: self.url_of(rel),
            problem,
            source: None,
        }
    }

    /// A store error on `rel`, sorted into what a caller can act on.
    fn error(&self, rel: &str, e: object_store::Error) -> Error {
        let problem = match &e {
            object_store::Error::NotFound { .. } => ArchiveProblem::Missing,
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => ArchiveProblem::Refused,
            _ => by_answer(&e),
        };
        Error::Archive {
            object: self.url_of(rel),
            problem,
            source: Some(Box::new(e)),
        }
    }
}

/// What an error `object_store` gives no variant of means: one that never
/// reached the store (connect, timeout: typed in its source chain) is
/// worth a retry; otherwise the store answered, and an S3 error code in
/// its answer says whether with a missing bucket or a refusal. Codes by
/// name only: a bare status like "403" also matched a port number in the
/// message (`127.0.0.1:40391`), which made a refused connection fatal.
fn by_answer(e: &object_store::Error) -> ArchiveProblem {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<object_store::client::HttpError>() {
            return ArchiveProblem::Unreachable;
        }
        cause = c.source();
    }
    let text = e.to_string();
    let has = |code: &str| text.contains(code);
    if has("NoSuchBucket") || has("NoSuchKey") {
        ArchiveProblem::Missing
    } else if has("AccessDenied") || has("InvalidAccessKeyId") || has("SignatureDoesNotMatch") {
        ArchiveProblem::Refused
    } else {
        ArchiveProblem::Unreachable
    }
}

/// An S3 client for `bucket`, settings from `opts`, then from the
/// environment. Plain HTTP is allowed: a store on loopback or a private
/// network is the usual case for a log's archive.
fn s3_builder(bucket: &str, opts: &StoreOptions) -> AmazonS3Builder {
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_allow_http(true)
        .with_retry(RetryConfig {
            max_retries: S3_RETRIES,
            retry_timeout: S3_RETRY_TIMEOUT,
            ..RetryConfig::default()
        });
    if let Ok(e) = std::env::var("AWS_ENDPOINT_URL") {
        b = b.with_endpoint(e);
    }
    if let Some(e) = &opts.endpoint {
        b = b.with_endpoint(e);
    }
    if let Some(r) = &opts.region {
        b = b.with_region(r);
    }
    if let Some(k) = &opts.access_key_id {
        b = b.with_access_key_id(k);
    }
    if let Some(s) = &opts.secret_access_key {
        b = b.with_secret_access_key(s);
    }
    b
}

/// The names of one node's objects under the archive's prefix.
pub(crate) struct Names {
    node: u32,
}

impl Names {
    pub fn new(node: u32) -> Names {
        Names { node }
    }

    /// The archive manifest.
    pub fn manifest(&self) -> String {
        format!("{:05}/archive.manifest", self.node)
    }

    /// A sealed segment's object.
    pub fn segment(&self, base: Lsn) -> String {
        format!(
            "{:05}/segments/{}",
            self.node,
            format::segment_file_name(self.node, base)
        )
    }

    /// The newest segment's archived prefix.
    pub fn tail(&self, base: Lsn) -> String {
        format!(
            "{:05}/tail/{}",
            self.node,
            format::segment_file_name(self.node, base)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_string().into(),
        }
    }

    #[test]
    fn an_answer_is_read_by_its_s3_code_never_by_a_number() {
        let refused_connect = generic(
            "Error performing PUT http://127.0.0.1:40391/b/x in 544ms, after 3 retries - \
             HTTP error: error sending request",
        );
        assert_eq!(by_answer(&refused_connect), ArchiveProblem::Unreachable);
        assert_eq!(
            by_answer(&generic("<Code>AccessDenied</Code>")),
            ArchiveProblem::Refused
        );
        assert_eq!(
            by_answer(&generic("<Code>NoSuchBucket</Code>")),
            ArchiveProblem::Missing
        );
    }
}
