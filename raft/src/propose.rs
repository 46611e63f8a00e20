//! [`Proposer`]: group commit of client writes at the leader. Commands
//! that arrive while a proposal is in flight go out together as one raft
//! entry ([`KvRequest::Batch`]), so that one append, one replication round
//! and one apply serve many clients.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::BasicNode;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::{KvConfig, KvRequest};

type Raft = openraft::Raft<KvConfig>;

/// What a write through the [`Proposer`] answers: as
/// `Raft::client_write`, with the reply of this command alone.
pub type WriteResult =
    Result<ClientWriteResponse<KvConfig>, RaftError<u64, ClientWriteError<u64, BasicNode>>>;

/// How large a batch grows and how long a command may wait for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// The most commands in one entry.
    pub max_commands: usize,
    /// The most bytes of commands (as JSON) in one entry. Keep it below
    /// the log's largest record less a few hundred bytes of entry framing:
    /// a single command larger than this still goes out alone.
    pub max_bytes: usize,
    /// How long a command may wait for the proposals in flight before it
    /// goes out anyway, beside them.
    pub max_wait: Duration,
    /// The most proposals in flight at once.
    pub max_in_flight: usize,
}

impl Default for BatchLimits {
    /// 1024 commands, 128 KiB, 1 ms, 4 proposals in flight.
    fn default() -> Self {
        BatchLimits {
            max_commands: 1024,
            max_bytes: 128 << 10,
            max_wait: Duration::from_millis(1),
            max_in_flight: 4,
        }
    }
}

/// One command waiting for its proposal, and where its reply goes.
struct Waiting {
    cmd: KvRequest,
    bytes: usize,
    since: Instant,
    reply: oneshot::Sender<WriteResult>,
}

/// Group commit of client writes in front of a `Raft<KvConfig>`.
///
/// A command that arrives when no proposal is in flight and none waits is
/// proposed at once, alone, from the caller's own task: nothing waits for
/// a batch to fill, and nothing hops to another task. Commands that
/// arrive while proposals are in flight queue, and the queue goes out as
/// one entry carrying all of them ([`KvRequest::Batch`]) as soon as a
/// proposal completes, the queue reaches [`BatchLimits::max_commands`] or
/// [`BatchLimits::max_bytes`], or its oldest command has waited
/// [`BatchLimits::max_wait`] (at most [`BatchLimits::max_in_flight`]
/// proposals at a time). Each caller is answered when the entry carrying
/// its command is applied, with its own command's reply, or with the
/// proposal's error (say `ForwardToLeader` on a follower).
///
/// Costs: one tokio task (spawned on the current runtime) that sends the
/// queue out, and one per batch in flight; per command one short lock and
/// one JSON encode into a byte counter (no allocation) to size it, and for
/// a queued one a oneshot.
#[derive(Debug)]
pub struct Proposer {
    shared: Arc<Shared>,
}

/// What the handles, the queue's task and the proposals share.
struct Shared {
    raft: Raft,
    queue: Mutex<Queue>,
    /// Wakes the queue's task: a command made the queue due, a proposal
    /// completed with commands waiting, or the last handle went away.
    wake: Notify,
    /// `Proposer` handles alive; the task ends when none is left and
    /// nothing waits.
    handles: AtomicUsize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One proposal in flight; counted out, and the task woken if commands
/// wait, when dropped (also when a caller's write is cancelled).
struct Flight(Arc<Shared>);

impl Drop for Flight {
    fn drop(&mut self) {
        let mut q = self.0.queue();
        q.in_flight -= 1;
        if !q.waiting.is_empty() {
            self.0.wake.notify_one();
        }
    }
}

/// How a command goes out.
enum Path {
    /// Nothing in flight, nothing waiting: proposed by the caller.
    Alone(KvRequest, Flight),
    /// Queued: the reply comes through the oneshot.
    Queued(oneshot::Receiver<WriteResult>),
}

impl Proposer {
    /// Start the queue's task for `raft` on the current tokio runtime.
    /// It ends once every `Proposer` clone is dropped and no command
    /// waits.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (as `tokio::spawn`).
    pub fn spawn(raft: Raft, limits: BatchLimits) -> Proposer {
        let shared = Arc::new(Shared {
            raft,
            queue: Mutex::new(Queue {
                limits,
                waiting: VecDeque::new(),
                bytes: 0,
                in_flight: 0,
            }),
            wake: Notify::new(),
            handles: AtomicUsize::new(1),
        });
        tokio::spawn(run(shared.clone()));
        Proposer { shared }
    }

    /// Propose `cmd` and wait until it is applied (or refused).
    ///
    /// # Errors
    ///
    /// As `Raft::client_write` for the entry that carried it; `Fatal::Stopped`
    /// if the queue's task is gone (its runtime shut down).
    ///
    /// Cost: as the type says; the wait is for the proposals in flight
    /// (at most `max_wait`) and then this one.
    pub async fn write(&self, cmd: KvRequest) -> WriteResult {
        let bytes = json_len(&cmd);
        let path = {
            let mut q = self.shared.queue();
            if q.in_flight == 0 && q.waiting.is_empty() {
                q.in_flight += 1;
                Path::Alone(cmd, Flight(self.shared.clone()))
            } else {
                let (reply, rx) = oneshot::channel();
                q.push(Waiting {
                    cmd,
                    bytes,
                    since: Instant::now(),
                    reply,
                });
                if q.due(Instant::now()) {
                    self.shared.wake.notify_one();
                }
                Path::Queued(rx)
            }
        };
        match path {
            Path::Alone(cmd, _flight) => self.shared.raft.client_write(cmd).await,
            Path::Queued(rx) => rx.await.map_err(|_| RaftError::Fatal(Fatal::Stopped))?,
        }
    }
}

impl Clone for Proposer {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        Proposer {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Proposer {
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.wake.notify_one();
        }
    }
}

/// The bytes of `cmd` as JSON, counted without keeping them.
fn json_len(cmd: &KvRequest) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Encoding these plain enums of strings into a sink cannot fail; a
    // failure would only leave the estimate short.
    let _ = serde_json::to_writer(&mut n, cmd);
    n.0
}

/// The queue: what waits, and how many proposals are in flight.
struct Queue {
    limits: BatchLimits,
    waiting: VecDeque<Waiting>,
    bytes: usize,
    in_flight: usize,
}

impl Queue {
    fn push(&mut self, w: Waiting) {
        self.bytes += w.bytes;
        self.waiting.push_back(w);
    }

    /// Whether the queue should go out now.
    fn due(&self, now: Instant) -> bool {
        let Some(oldest) = self.waiting.front() else {
            return false;
        };
        let in_flight = self.in_flight;
        in_flight < self.limits.max_in_flight
            && (in_flight == 0
                || self.waiting.len() >= self.limits.max_commands
                || self.bytes >= self.limits.max_bytes
                || now >= oldest.since + self.limits.max_wait)
    }

    /// The next batch: the oldest commands, within the limits (at least
    /// one).
    fn take(&mut self) -> Vec<Waiting> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(w) = self.waiting.front() {
            let full =
                batch.len() >= self.limits.max_commands || bytes + w.bytes > self.limits.max_bytes;
            if !batch.is_empty() && full {
                break;
            }
            bytes += w.bytes;
            batch.extend(self.waiting.pop_front());
        }
        self.bytes -= bytes;
        batch
    }

    /// When the oldest command's wait runs out, if any waits.
    fn deadline(&self) -> Option<Instant> {
        self.waiting.front().map(|w| w.since + self.limits.max_wait)
    }
}

/// The queue's task: sends out what is due, sleeps until it is woken or
/// the oldest command's wait runs out, and ends once no handle is left
/// and nothing waits.
async fn run(shared: Arc<Shared>) {
    loop {
        let deadline = {
            let mut q = shared.queue();
            let now = Instant::now();
            while q.due(now) {
                let batch = q.take();
                q.in_flight += 1;
                tokio::spawn(propose(Flight(shared.clone()), batch));
            }
            if shared.handles.load(Ordering::Acquire) == 0 && q.waiting.is_empty() {
                return;
            }
            // A wait already run out, with no room in flight: a
            // completion wakes the task.
            q.deadline().filter(|&d| d > now)
        };
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = sleep_until(deadline), if deadline.is_some() => {}
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(d) = deadline {
        tokio::time::sleep_until(d).await;
    }
}

/// Propose `batch` as one entry (a single command as itself) and answer
/// each caller.
async fn propose(flight: Flight, mut batch: Vec<Waiting>) {
    let raft = &flight.0.raft;
    if batch.len() == 1 {
        let w = batch.remove(0);
        let _ = w.reply.send(raft.client_write(w.cmd).await);
        return;
    }
    let (cmds, replies): (Vec<KvRequest>, Vec<_>) =
        batch.into_iter().map(|w| (w.cmd, w.reply)).unzip();
    match raft.client_write(KvRequest::Batch(cmds)).await {
        Ok(resp) => {
            // The state machine answers a batch with one reply per
            // command, in order.
            let mut each = resp.data.batch.into_iter();
            for reply in replies {
                let _ = reply.send(Ok(ClientWriteResponse {
                    log_id: resp.log_id,
                    data: each.next().unwrap_or_default(),
                    membership: None,
                }));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BatchLimits {
        BatchLimits {
            max_commands: 3,
            max_bytes: 100,
            max_wait: Duration::from_millis(5),
            max_in_flight: 2,
        }
    }

    fn queue(sizes: &[usize], since: Instant) -> Queue {
        let mut q = Queue {
            limits: limits(),
            waiting: VecDeque::new(),
            bytes: 0,
            in_flight: 0,
        };
        for &bytes in sizes {
            q.push(Waiting {
                cmd: KvRequest::Delete { key: "k".into() },
                bytes,
                since,
                reply: oneshot::channel().0,
            });
        }
        q
    }

    /// `queue` with `n` proposals in flight.
    fn flying(mut q: Queue, n: usize) -> Queue {
        q.in_flight = n;
        q
    }

    #[test]
    fn nothing_in_flight_means_no_wait() {
        let now = Instant::now();
        assert!(queue(&[10], now).due(now));
        assert!(!queue(&[], now).due(now));
    }

    #[test]
    fn in_flight_a_command_waits_until_its_time_or_a_full_batch() {
        let now = Instant::now();
        let q = flying(queue(&[10], now), 1);
        assert!(!q.due(now));
        assert!(!q.due(now + Duration::from_millis(4)));
        assert!(q.due(now + Duration::from_millis(5)));
        // At the limit of proposals in flight, even an old one waits.
        let q = flying(queue(&[10], now), 2);
        assert!(!q.due(now + Duration::from_secs(1)));
        assert!(
            flying(queue(&[10, 10, 10], now), 1).due(now),
            "max_commands"
        );
        assert!(flying(queue(&[60, 40], now), 1).due(now), "max_bytes");
    }

    #[test]
    fn a_batch_keeps_to_the_limits_and_takes_at_least_one() {
        let now = Instant::now();
        let mut q = queue(&[10, 10, 10, 10, 10], now);
        assert_eq!(q.take().len(), 3);
        assert_eq!((q.waiting.len(), q.bytes), (2, 20));

        let mut q = queue(&[60, 30, 20], now);
        assert_eq!(q.take().len(), 2, "60 + 30 fit 100, 20 more do not");
        assert_eq!(q.take().len(), 1);
        assert_eq!(q.bytes, 0);

        let mut q = queue(&[500, 10], now);
        assert_eq!(q.take().len(), 1, "a command over max_bytes goes alone");
        assert_eq!(q.take().len(), 1);
    }

    #[test]
    fn a_command_is_sized_as_its_json() {
        let cmd = KvRequest::Set {
            key: "k".into(),
            value: "v\u{1}".into(),
        };
        assert_eq!(json_len(&cmd), serde_json::to_vec(&cmd).unwrap().len());
    }
}
