//! The in-flight ledger: every operation the ring submits, in submission
//! order, and the contiguous-prefix rule that turns their completions into
//! watermarks (ARCHITECTURE invariant 2).
//!
//! Each operation gets an id in submission order and an entry in
//! `pending`; completions may arrive in any order, but the watermarks
//! advance only by popping finished entries off the front. That is what
//! makes a completed-but-later write invisible until everything before it
//! landed, and what orders a segment's header write and directory sync
//! before any acknowledgement of the records inside it.
//!
//! Pure bookkeeping: no I/O, no locks, no allocation once `pending` has
//! grown to the ring's depth.

use std::collections::VecDeque;

use crate::error::Lsn;

/// What an operation in flight means for the watermarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A batch write; `last_lsn` 0 means padding only. `durable`: written
    /// with `RWF_DSYNC` (or linked to `fdatasync`), so its completion
    /// makes its records durable too.
    Write { last_lsn: Lsn, durable: bool },
    /// An fdatasync covering every LSN up to `covers`.
    Sync { covers: Lsn },
    /// Segment header write, seal or directory sync: orders, acknowledges
    /// nothing.
    Barrier,
}

struct Entry {
    kind: OpKind,
    done: bool,
}

/// Operations in flight and the watermarks their finished prefix proves.
pub(crate) struct Ledger {
    pending: VecDeque<Entry>,
    /// Id of the entry at the front of `pending`.
    front_id: u64,
    /// Batch writes in `pending` not yet complete.
    writes: usize,
    /// Highest `last_lsn` of any write pushed: writes carry ascending LSNs.
    pushed: Lsn,
    written: Lsn,
    durable: Lsn,
}

impl Ledger {
    /// An empty ledger whose watermarks start at `last`, the last LSN
    /// already on disk. `depth`: the most operations expected in flight,
    /// reserved up front so the ring loop does not allocate.
    pub fn new(last: Lsn, depth: usize) -> Ledger {
        Ledger {
            pending: VecDeque::with_capacity(depth),
            front_id: 0,
            writes: 0,
            pushed: last,
            written: last,
            durable: last,
        }
    }

    /// Record a submitted operation and return its id (submission order).
    ///
    /// Asserts what the prefix rule relies on: writes carry strictly
    /// ascending LSNs, and a sync covers only LSNs whose writes had all
    /// completed when it was issued (invariant 3).
    pub fn push(&mut self, kind: OpKind) -> u64 {
        match kind {
            OpKind::Write { last_lsn, .. } => {
                if last_lsn > 0 {
                    assert!(
                        last_lsn > self.pushed,
                        "write of LSN {last_lsn} submitted after LSN {}",
                        self.pushed
                    );
                    self.pushed = last_lsn;
                }
                self.writes += 1;
            }
            OpKind::Sync { covers } => assert!(
                covers <= self.written,
                "sync covers LSN {covers} past the written watermark {}",
                self.written
            ),
            OpKind::Barrier => {}
        }
        let id = self.front_id + self.pending.len() as u64;
        self.pending.push_back(Entry { kind, done: false });
        id
    }

    /// Mark operation `id` finished (successfully or not) and return what
    /// it was. Nothing moves until [`advance`](Self::advance).
    pub fn complete(&mut self, id: u64) -> OpKind {
        let idx = id
            .checked_sub(self.front_id)
            .expect("completion of an operation already retired") as usize;
        let e = self
            .pending
            .get_mut(idx)
            .expect("completion of an operation never submitted");
        assert!(!e.done, "operation {id} completed twice");
        e.done = true;
        if matches!(e.kind, OpKind::Write { .. }) {
            self.writes = self
                .writes
                .checked_sub(1)
                .expect("more write completions than writes");
        }
        e.kind
    }

    /// Pop the finished prefix and move the watermarks over it; returns
    /// the new (written, durable). Never backwards, and durable never
    /// ahead of written: asserted, in release builds too (two compares
    /// per call).
    pub fn advance(&mut self) -> (Lsn, Lsn) {
        let (mut w, mut d) = (self.written, self.durable);
        while self.pending.front().is_some_and(|e| e.done) {
            let e = self.pending.pop_front().expect("front checked");
            self.front_id += 1;
            match e.kind {
                OpKind::Write { last_lsn, durable } if last_lsn > 0 => {
                    debug_assert!(
                        last_lsn > w,
                        "writes retire in LSN order: {last_lsn} after {w}"
                    );
                    w = last_lsn;
                    if durable {
                        d = last_lsn;
                    }
                }
                OpKind::Sync { covers } => d = d.max(covers),
                _ => {}
            }
        }
        assert!(
            w >= self.written && d >= self.durable,
            "watermarks went backwards: written {} -> {w}, durable {} -> {d}",
            self.written,
            self.durable
        );
        assert!(d <= w, "durable {d} ahead of written {w}");
        self.written = w;
        self.durable = d;
        (w, d)
    }

    /// Pop the finished prefix without moving the watermarks: after a
    /// failure nothing more is acknowledged, but entries must still
    /// retire so the ring can tell when the kernel is done.
    pub fn drain_done(&mut self) {
        while self.pending.front().is_some_and(|e| e.done) {
            self.pending.pop_front();
            self.front_id += 1;
        }
    }

    /// Highest LSN whose write, and everything submitted before it, is done.
    pub fn written(&self) -> Lsn {
        self.written
    }

    /// Highest LSN proven durable by the finished prefix.
    pub fn durable(&self) -> Lsn {
        self.durable
    }

    /// Batch writes submitted and not yet complete.
    pub fn writes(&self) -> usize {
        self.writes
    }

    /// Nothing in flight, and nothing finished but not yet retired.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether any batch write is in `pending`: in flight, or done but not
    /// yet advanced over (so not covered by a sync issued now).
    pub fn has_write(&self) -> bool {
        self.pending
            .iter()
            .any(|e| matches!(e.kind, OpKind::Write { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write(last_lsn: Lsn) -> OpKind {
        OpKind::Write {
            last_lsn,
            durable: false,
        }
    }

    #[test]
    fn a_later_write_stays_invisible_until_the_earlier_lands() {
        let mut l = Ledger::new(0, 4);
        let a = l.push(write(3));
        let b = l.push(write(7));
        assert_eq!(l.writes(), 2);
        l.complete(b);
        assert_eq!(l.advance(), (0, 0));
        l.complete(a);
        assert_eq!(l.advance(), (7, 0));
        assert!(l.is_empty());
        assert_eq!(l.writes(), 0);
    }

    #[test]
    fn barriers_hold_back_the_writes_behind_them() {
        let mut l = Ledger::new(10, 4);
        let h = l.push(OpKind::Barrier);
        let w = l.push(OpKind::Write {
            last_lsn: 12,
            durable: true,
        });
        l.complete(w);
        assert_eq!(l.advance(), (10, 10));
        l.complete(h);
        assert_eq!(l.advance(), (12, 12));
    }

    #[test]
    fn a_sync_makes_durable_what_it_covers_and_no_more() {
        let mut l = Ledger::new(0, 4);
        let a = l.push(write(5));
        l.complete(a);
        assert_eq!(l.advance(), (5, 0));
        let s = l.push(OpKind::Sync {
            covers: l.written(),
        });
        let b = l.push(write(9));
        assert!(l.has_write());
        l.complete(b);
        l.complete(s);
        assert_eq!(l.advance(), (9, 5));
        assert!(!l.has_write());
    }

    #[test]
    fn after_a_failure_entries_retire_without_acknowledging() {
        let mut l = Ledger::new(0, 4);
        let a = l.push(write(1));
        let b = l.push(write(2));
        l.complete(b);
        l.complete(a);
        l.drain_done();
        assert!(l.is_empty());
        assert_eq!((l.written(), l.durable()), (0, 0));
    }

    #[test]
    #[should_panic(expected = "completed twice")]
    fn a_double_completion_is_a_bug() {
        let mut l = Ledger::new(0, 4);
        let a = l.push(write(1));
        l.push(write(2));
        l.complete(a);
        l.complete(a);
    }

    #[test]
    #[should_panic(expected = "past the written watermark")]
    fn a_sync_cannot_cover_unwritten_records() {
        let mut l = Ledger::new(0, 4);
        l.push(write(1));
        l.push(OpKind::Sync { covers: 1 });
    }

    #[test]
    #[should_panic(expected = "submitted after")]
    fn writes_go_out_in_lsn_order() {
        let mut l = Ledger::new(0, 4);
        l.push(write(5));
        l.push(write(4));
    }

    #[derive(Clone, Debug)]
    enum Action {
        /// A write with `gap` new records (0: padding only), durable or not.
        Write {
            gap: u64,
            durable: bool,
        },
        Sync,
        Barrier,
        /// Complete the `n`th (modulo) operation not yet complete.
        Complete(usize),
        Advance,
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            3 => (0u64..4, any::<bool>()).prop_map(|(gap, durable)| Action::Write { gap, durable }),
            1 => Just(Action::Sync),
            1 => Just(Action::Barrier),
            4 => any::<usize>().prop_map(Action::Complete),
            2 => Just(Action::Advance),
        ]
    }

    /// The model: every operation ever pushed, with whether it completed.
    struct Model {
        start: Lsn,
        ops: Vec<(OpKind, bool)>,
    }

    impl Model {
        /// The watermarks the finished prefix proves, computed afresh.
        fn expected(&self) -> (Lsn, Lsn) {
            let (mut w, mut d) = (self.start, self.start);
            for (kind, done) in &self.ops {
                if !done {
                    break;
                }
                match *kind {
                    OpKind::Write { last_lsn, durable } if last_lsn > 0 => {
                        w = last_lsn;
                        if durable {
                            d = last_lsn;
                        }
                    }
                    OpKind::Sync { covers } => d = d.max(covers),
                    _ => {}
                }
            }
            (w, d)
        }

        /// No watermark covers a write that is incomplete, or that has an
        /// incomplete operation anywhere before it.
        fn check_safe(&self, w: Lsn, d: Lsn) -> Result<(), TestCaseError> {
            let mut all_done = true;
            for (kind, done) in &self.ops {
                all_done &= done;
                if let OpKind::Write { last_lsn, .. } = *kind
                    && last_lsn > 0
                    && last_lsn <= w.max(d)
                {
                    prop_assert!(all_done, "watermark ({w}, {d}) covers write {last_lsn}");
                }
            }
            Ok(())
        }
    }

    fn check_advance(
        l: &mut Ledger,
        m: &Model,
        last: &mut (Lsn, Lsn),
    ) -> Result<(), TestCaseError> {
        let (w, d) = l.advance();
        prop_assert!(
            w >= last.0 && d >= last.1,
            "backwards: {last:?} -> {:?}",
            (w, d)
        );
        prop_assert!(d <= w);
        prop_assert_eq!((w, d), m.expected());
        m.check_safe(w, d)?;
        *last = (w, d);
        Ok(())
    }

    /// Complete the `n`th (modulo) operation still open, if any.
    fn complete(l: &mut Ledger, m: &mut Model, n: usize) -> Result<(), TestCaseError> {
        let open: Vec<usize> = (0..m.ops.len()).filter(|&i| !m.ops[i].1).collect();
        if let Some(&i) = open.get(n % open.len().max(1)) {
            prop_assert_eq!(l.complete(i as u64), m.ops[i].0);
            m.ops[i].1 = true;
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn any_completion_order_acknowledges_only_a_finished_prefix(
            start in 0u64..1000,
            actions in prop::collection::vec(action(), 0..300),
            tail in prop::collection::vec(any::<usize>(), 0..300),
        ) {
            let mut l = Ledger::new(start, 8);
            let mut m = Model { start, ops: Vec::new() };
            let mut next = start;
            let mut last = (start, start);
            for a in actions {
                match a {
                    Action::Write { gap, durable } => {
                        next += gap;
                        let kind = OpKind::Write {
                            last_lsn: if gap == 0 { 0 } else { next },
                            durable,
                        };
                        prop_assert_eq!(l.push(kind), m.ops.len() as u64);
                        m.ops.push((kind, false));
                    }
                    Action::Sync => {
                        let kind = OpKind::Sync { covers: l.written() };
                        prop_assert_eq!(l.push(kind), m.ops.len() as u64);
                        m.ops.push((kind, false));
                    }
                    Action::Barrier => {
                        prop_assert_eq!(l.push(OpKind::Barrier), m.ops.len() as u64);
                        m.ops.push((OpKind::Barrier, false));
                    }
                    Action::Complete(n) => complete(&mut l, &mut m, n)?,
                    Action::Advance => check_advance(&mut l, &m, &mut last)?,
                }
                let in_flight = m
                    .ops
                    .iter()
                    .filter(|(k, done)| !done && matches!(k, OpKind::Write { .. }))
                    .count();
                prop_assert_eq!(l.writes(), in_flight);
            }
            // Finish everything in a random order, advancing as we go:
            // then the watermarks reach the last write, and nothing is left.
            for n in tail {
                complete(&mut l, &mut m, n)?;
                check_advance(&mut l, &m, &mut last)?;
            }
            for i in 0..m.ops.len() {
                if !m.ops[i].1 {
                    l.complete(i as u64);
                    m.ops[i].1 = true;
                }
            }
            check_advance(&mut l, &m, &mut last)?;
            prop_assert!(l.is_empty());
            prop_assert_eq!(l.writes(), 0);
            prop_assert_eq!(l.written(), next);
        }
    }
}
