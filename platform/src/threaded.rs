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

use crate::queue::{check_push, Completion, IoQueue, Op, QueueKind, Tally, Wait};
use crate::Notifier;

/// Blocking, in-order [`IoQueue`]. See the module docs.
#[derive(Debug)]
pub struct ThreadedQueue {
    notifier: Arc<Notifier>,
    queued: VecDeque<(u64, Op)>,
    done: VecDeque<Completion>,
    tally: Tally,
}

impl ThreadedQueue {
    /// A queue woken by `notifier` when it has nothing to do.
    pub fn new(notifier: Arc<Notifier>) -> ThreadedQueue {
        ThreadedQueue {
            notifier,
            queued: VecDeque::new(),
            done: VecDeque::new(),
            tally: Tally::default(),
        }
    }
}

impl IoQueue for ThreadedQueue {
    fn push(&mut self, id: u64, op: Op) {
        check_push(id, &op);
        self.queued.push_back((id, op));
        self.tally.push();
        self.tally.check(self.in_flight());
    }

    fn run(&mut self, wait: Wait) -> io::Result<()> {
        let mut did = false;
        let mut failed = false;
        while let Some((id, op)) = self.queued.pop_front() {
            // After a failure the rest of the batch is not attempted: its
            // syncs would follow a failed one, which proves nothing (the
            // kernel may have dropped the dirty pages it could not write),
            // and the caller, who has not seen the failure yet, would take
            // a later success for durability. With io_uring such
            // operations are in the kernel already; here they are not.
            let result = if failed {
                Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "not attempted: an earlier operation of the batch failed",
                ))
            } else {
                crate::queue::execute_blocking(&op)
            };
            failed |= result.is_err();
            self.done.push_back(Completion {
                id,
                result,
                op,
                in_place: true,
            });
            did = true;
        }
        self.tally.check(self.in_flight());
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
        let c = self.done.pop_front()?;
        self.tally.pop();
        self.tally.check(self.in_flight());
        Some(c)
    }

    fn in_flight(&self) -> usize {
        self.queued.len() + self.done.len()
    }

    fn kind(&self) -> QueueKind {
        QueueKind::Threaded
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::sim::{Faults, SimFs};
    use crate::{AlignedBuf, OpenHow, WriteSync};

    fn write(file: &crate::VFile, len: usize, offset: u64) -> Op {
        Op::Write {
            file: file.clone(),
            buf: AlignedBuf::new(4096),
            len,
            offset,
            sync: WriteSync::None,
        }
    }

    fn open(fs: &SimFs, direct: bool) -> crate::VFile {
        let vfs = fs.vfs();
        vfs.create_dir_all(Path::new("/d"), 0o700).unwrap();
        let how = OpenHow {
            write: true,
            create: true,
            direct,
            ..OpenHow::default()
        };
        vfs.open(Path::new("/d/seg"), how).unwrap()
    }

    /// A write to a file opened without O_DIRECT may be of any length
    /// at any offset.
    #[test]
    fn a_buffered_file_takes_a_misaligned_write() {
        let fs = SimFs::new(1, Faults::default());
        let file = open(&fs, false);
        let mut q = ThreadedQueue::new(Arc::new(Notifier::new().unwrap()));
        q.push(1, write(&file, 100, 7));
        q.run(Wait::NoWait).unwrap();
        q.pop().expect("its completion").result.unwrap();
        assert_eq!(q.in_flight(), 0);
    }

    /// A misaligned write to an O_DIRECT file, which a real disk would
    /// refuse, stops at push, before anything is written.
    #[test]
    #[should_panic(expected = "misaligned write to an O_DIRECT file")]
    fn a_misaligned_write_to_a_direct_file_is_refused_at_push() {
        let fs = SimFs::new(1, Faults::default());
        let file = open(&fs, true);
        let mut q = ThreadedQueue::new(Arc::new(Notifier::new().unwrap()));
        q.push(1, write(&file, 4096, 0));
        q.push(2, write(&file, 4096, 512));
    }

    /// A write never reads past its buffer.
    #[test]
    #[should_panic(expected = "from a buffer of 4096")]
    fn a_write_longer_than_its_buffer_is_refused_at_push() {
        let fs = SimFs::new(1, Faults::default());
        let file = open(&fs, false);
        let mut q = ThreadedQueue::new(Arc::new(Notifier::new().unwrap()));
        q.push(1, write(&file, 8192, 0));
    }

    #[test]
    fn after_a_failed_sync_the_rest_of_the_batch_is_not_attempted() {
        // The second sync of the disk fails: the first write's own.
        let fs = SimFs::new(
            1,
            Faults {
                fail_sync_at: Some(2),
                ..Faults::default()
            },
        );
        let vfs = fs.vfs();
        let path = Path::new("/d/seg");
        vfs.create_dir_all(Path::new("/d"), 0o700).unwrap();
        let file = vfs
            .open(
                path,
                OpenHow {
                    write: true,
                    create: true,
                    ..OpenHow::default()
                },
            )
            .unwrap();
        file.sync_data().unwrap();
        let mut q = ThreadedQueue::new(Arc::new(Notifier::new().unwrap()));
        for (id, offset) in [(1, 0), (2, 4096), (3, 8192)] {
            q.push(
                id,
                Op::Write {
                    file: file.clone(),
                    buf: AlignedBuf::new(4096),
                    len: 4096,
                    offset,
                    sync: WriteSync::ThenSync,
                },
            );
        }
        q.run(Wait::NoWait).unwrap();
        let results: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|c| (c.id, c.result.is_ok()))
            .collect();
        assert_eq!(results, [(1, false), (2, false), (3, false)]);
        assert_eq!(fs.file_syncs(path), 2, "no sync after the failed one");
        assert_eq!(fs.writes(), 1, "nothing after the failure was written");
    }
}
