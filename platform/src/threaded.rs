//! The portable [`IoQueue`]: every operation is a blocking call made by
//! the thread that calls [`IoQueue::run`], one at a time, in push order.
//! It drives any [`FileIo`](crate::vfs::FileIo), real or simulated.
//!
//! It has the same semantics as the io_uring queue with a depth of one,
//! which is all the engine relies on; it exists for platforms without
//! io_uring (macOS, where syncs are `F_FULLFSYNC`) and as a reference
//! implementation the integration suite runs against.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use crate::queue::{Completion, IoQueue, Op, QueueKind, Wait, WriteSync};
use crate::Notifier;

/// Blocking, in-order [`IoQueue`]. See the module docs.
#[derive(Debug)]
pub struct ThreadedQueue {
    notifier: Arc<Notifier>,
    queued: VecDeque<(u64, Op)>,
    done: VecDeque<Completion>,
}

impl ThreadedQueue {
    /// A queue woken by `notifier` when it has nothing to do.
    pub fn new(notifier: Arc<Notifier>) -> ThreadedQueue {
        ThreadedQueue {
            notifier,
            queued: VecDeque::new(),
            done: VecDeque::new(),
        }
    }

    fn execute(op: &Op) -> io::Result<()> {
        match op {
            Op::Write {
                file: f,
                buf,
                len,
                offset,
                sync,
            } => {
                let data = &buf.as_slice()[..*len];
                f.write_at(data, *offset, *sync == WriteSync::Dsync)?;
                if *sync == WriteSync::ThenSync {
                    f.sync_data()?;
                }
                Ok(())
            }
            Op::Sync { file: f, data_only } => {
                if *data_only {
                    f.sync_data()
                } else {
                    f.sync_all()
                }
            }
        }
    }
}

impl IoQueue for ThreadedQueue {
    fn push(&mut self, id: u64, op: Op) {
        self.queued.push_back((id, op));
    }

    fn run(&mut self, wait: Wait) -> io::Result<()> {
        let mut did = false;
        while let Some((id, op)) = self.queued.pop_front() {
            let result = Self::execute(&op);
            self.done.push_back(Completion { id, result, op });
            did = true;
        }
        if did || !self.done.is_empty() {
            return Ok(());
        }
        match wait {
            Wait::NoWait => {}
            Wait::Block => {
                self.notifier.wait(None)?;
            }
            Wait::Timeout(t) => {
                self.notifier.wait(Some(t))?;
            }
        }
        Ok(())
    }

    fn pop(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }

    fn in_flight(&self) -> usize {
        self.queued.len() + self.done.len()
    }

    fn kind(&self) -> QueueKind {
        QueueKind::Threaded
    }
}
