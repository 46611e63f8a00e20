use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::BLOCK;

/// A fixed-capacity, zero-initialised heap buffer aligned to [`BLOCK`].
///
/// O_DIRECT writes need the buffer address aligned to the logical block
/// size, which `Vec<u8>` does not promise. The capacity is rounded up to a
/// whole number of blocks so a write of any block-aligned prefix stays in
/// bounds.
///
/// Cost: two allocations (the buffer, zeroed, and a reference count that
/// lets a queue keep registered memory alive) at construction; nothing
/// afterwards. The engine allocates these once and recycles them, so the
/// append path never allocates.
///
/// A range of the buffer may be [`claim`](Self::claim)ed: handed, as a
/// [`Slot`], to another thread to fill while the owner goes on writing
/// past it. Until every slot is dropped the owner may touch only the bytes
/// after the claims ([`tail_mut`](Self::tail_mut)); the whole-buffer views
/// and the kernel's pointer panic while one is outstanding, so no two
/// threads ever hold the same bytes.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    /// Owns the allocation. Only this `AlignedBuf` ever touches the bytes;
    /// other holders (a queue that registered the buffer with the kernel)
    /// only keep the memory from being freed while the kernel may use it.
    /// Without io_uring (macOS) nothing else holds it: it is kept for its
    /// drop, which frees the memory.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    alloc: Arc<Allocation>,
    /// Every slot handed out since the buffer last had none lies below
    /// this offset; the owner's mutable views start at or above it.
    claimed_to: usize,
}

/// A heap allocation freed when the last holder lets go.
pub(crate) struct Allocation {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Slots of the buffer handed out and not yet released: kept here so
    /// that a slot holds one reference count, not two.
    claims: AtomicUsize,
}

// SAFETY: an Allocation is a pointer, a layout and an atomic count;
// holders other than the owning AlignedBuf never dereference it, except a
// Slot within its own claimed range (which nothing else touches while it
// is out), and freeing from any thread is allowed by the global allocator.
unsafe impl Send for Allocation {}
// SAFETY: as above: shared references never touch the bytes.
unsafe impl Sync for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout in
        // `AlignedBuf::new`, and this is the last holder.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: AlignedBuf is the only user of its allocation's bytes, like a
// Vec<u8>; moving it between threads moves that exclusive use.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`, which is Sync for u8.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocate a zeroed buffer of at least `cap` bytes (rounded up to a
    /// multiple of [`BLOCK`], minimum one block).
    ///
    /// Panics if the allocation fails, like `Vec` does.
    pub fn new(cap: usize) -> AlignedBuf {
        let cap = cap.max(1).div_ceil(BLOCK) * BLOCK;
        let layout = Self::layout(cap);
        // SAFETY: layout has a non-zero size (cap >= BLOCK).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        // What O_DIRECT and a registered write rely on, and what every
        // whole-block prefix write relies on to stay inside the buffer.
        assert!(
            ptr.as_ptr().addr().is_multiple_of(BLOCK),
            "allocator returned {:p}, not aligned to {BLOCK}",
            ptr.as_ptr()
        );
        assert!(
            cap >= BLOCK && cap.is_multiple_of(BLOCK),
            "capacity {cap} is not a whole number of blocks"
        );
        AlignedBuf {
            ptr,
            cap,
            alloc: Arc::new(Allocation {
                ptr,
                layout,
                claims: AtomicUsize::new(0),
            }),
            claimed_to: 0,
        }
    }

    /// A handle that keeps this buffer's memory allocated even after the
    /// buffer is dropped (for a registration with the kernel).
    #[cfg(target_os = "linux")]
    pub(crate) fn allocation(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    fn layout(cap: usize) -> Layout {
        Layout::from_size_align(cap, BLOCK).expect("aligned buffer layout")
    }

    /// Capacity in bytes (a multiple of [`BLOCK`]).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The address of the first byte, for alignment checks only (never
    /// dereferenced). Unlike the views, allowed while slots are out.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr().addr()
    }

    /// The whole buffer as a byte slice. Panics while a [`Slot`] of it is
    /// outstanding. Cost: one atomic load.
    pub fn as_slice(&self) -> &[u8] {
        self.assert_settled();
        // SAFETY: ptr points to `cap` initialised (zeroed at allocation)
        // bytes owned by self; no slot is outstanding (checked above, and
        // only `&mut self` makes new ones), so nothing writes them while
        // the borrow of self lasts.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }

    /// The whole buffer as a mutable byte slice. Panics while a [`Slot`]
    /// of it is outstanding; forgets the claims made before. Cost: one
    /// atomic load.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.assert_settled();
        self.claimed_to = 0;
        // SAFETY: as in as_slice, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    /// The bytes from `from` to the end, which must lie after every range
    /// claimed since the buffer last had no slot out: the owner keeps
    /// writing there while slots before it are filled. Cost: none.
    pub fn tail_mut(&mut self, from: usize) -> &mut [u8] {
        assert!(
            from >= self.claimed_to && from <= self.cap,
            "tail at {from} overlaps a claim up to {} (capacity {})",
            self.claimed_to,
            self.cap
        );
        // SAFETY: [from, cap) is inside the allocation and after every
        // outstanding slot's range (each lies below `claimed_to`), and
        // &mut self excludes the owner's other views.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(from), self.cap - from) }
    }

    /// Hand `len` bytes at `at` to a [`Slot`] another thread may fill.
    /// The range must lie after every range claimed before it (claims
    /// only move forward) and inside the buffer. Cost: one atomic
    /// increment and one reference count.
    pub fn claim(&mut self, at: usize, len: usize) -> Slot {
        assert!(
            at >= self.claimed_to && at.checked_add(len).is_some_and(|end| end <= self.cap),
            "claim of {len} at {at} overlaps a claim up to {} or passes capacity {}",
            self.claimed_to,
            self.cap
        );
        self.claimed_to = at + len;
        self.alloc.claims.fetch_add(1, Ordering::Relaxed);
        Slot {
            // SAFETY: at + len <= cap (asserted), so the pointer stays
            // inside the allocation.
            ptr: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(at)) },
            len,
            alloc: Some(self.alloc.clone()),
        }
    }

    /// Whether no [`Slot`] of this buffer is outstanding: every claim was
    /// filled (or abandoned) and its writes are visible to the caller.
    /// Cost: one sequentially consistent atomic load, so a thread that
    /// announces it waits for fills and then asks cannot miss the last
    /// filler's wake-up.
    pub fn settled(&self) -> bool {
        self.alloc.claims.load(Ordering::SeqCst) == 0
    }

    fn assert_settled(&self) {
        assert!(
            self.settled(),
            "a claimed range of the buffer is still being filled"
        );
    }

    /// Raw pointer for kernel submissions; valid while `self` is alive and
    /// not moved out of its heap allocation (moving the `AlignedBuf` value
    /// itself does not move the bytes).
    #[cfg(target_os = "linux")]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        // The kernel reads every byte it is given: none may still be
        // being filled.
        self.assert_settled();
        self.ptr.as_ptr()
    }
}

/// A range of an [`AlignedBuf`] claimed for one thread to fill
/// ([`AlignedBuf::claim`]). It keeps the memory allocated on its own; the
/// buffer counts it as outstanding until it is dropped, which publishes
/// what was written to whoever next sees the buffer
/// [`settled`](AlignedBuf::settled).
pub struct Slot {
    ptr: NonNull<u8>,
    len: usize,
    /// The buffer's memory and its count of outstanding slots; taken
    /// when released.
    alloc: Option<Arc<Allocation>>,
}

// SAFETY: a Slot is the only holder of its range (claims never overlap
// and the owner's views exclude outstanding ranges); moving it moves that
// exclusive use, as with a `&mut [u8]`.
unsafe impl Send for Slot {}

impl Slot {
    /// The claimed bytes. Cost: none.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the range lies inside the allocation `alloc` keeps
        // alive (it is taken only by `let_go`, after which no method runs),
        // no other view of it exists while the slot does, and &mut self
        // makes this one exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Let go of the range; returns whether it was the buffer's last
    /// outstanding slot. Cost: one atomic read-modify-write.
    pub fn release(mut self) -> bool {
        self.let_go()
    }

    fn let_go(&mut self) -> bool {
        // Sequentially consistent (so at least Release): the bytes written
        // through this slot happen before the owner's next whole-buffer
        // view, whose load is SeqCst too.
        // `take` makes a slot's release happen once, whether by `release`
        // or by drop; the count must then hold this slot's claim.
        self.alloc.take().is_some_and(|a| {
            let before = a.claims.fetch_sub(1, Ordering::SeqCst);
            assert!(
                before > 0,
                "slot of {} bytes released with no claim outstanding",
                self.len
            );
            before == 1
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.let_go();
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("len", &self.len).finish()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("cap", &self.cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_rounded() {
        let mut b = AlignedBuf::new(5000);
        assert_eq!(b.capacity(), 2 * BLOCK);
        assert_eq!(b.addr() % BLOCK, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[8191] = 7;
        assert_eq!(b.as_slice()[8191], 7);
        assert_eq!(AlignedBuf::new(0).capacity(), BLOCK);
    }

    #[test]
    fn slots_filled_on_other_threads_are_seen_once_all_are_released() {
        let mut b = AlignedBuf::new(BLOCK);
        let slots: Vec<Slot> = (0..4).map(|i| b.claim(i * 100, 100)).collect();
        assert!(!b.settled());
        // The owner goes on writing after the claims while they are out.
        b.tail_mut(400)[0] = 9;
        let lasts: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = slots
                .into_iter()
                .enumerate()
                .map(|(i, mut slot)| {
                    s.spawn(move || {
                        slot.bytes().fill(i as u8 + 1);
                        slot.release()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            lasts.iter().filter(|&&l| l).count(),
            1,
            "exactly one slot is the last"
        );
        assert!(b.settled());
        for i in 0..4 {
            assert!(b.as_slice()[i * 100..(i + 1) * 100]
                .iter()
                .all(|&x| x == i as u8 + 1));
        }
        assert_eq!(b.as_slice()[400], 9);
    }

    #[test]
    fn an_abandoned_slot_counts_as_released() {
        let mut b = AlignedBuf::new(BLOCK);
        let slot = b.claim(0, 8);
        drop(slot);
        assert!(b.settled());
        let _ = b.as_slice();
    }

    #[test]
    #[should_panic(expected = "still being filled")]
    fn the_whole_buffer_is_refused_while_a_slot_is_out() {
        let mut b = AlignedBuf::new(BLOCK);
        let _slot = b.claim(0, 8);
        let _ = b.as_slice();
    }

    #[test]
    #[should_panic(expected = "overlaps a claim")]
    fn claims_never_overlap() {
        let mut b = AlignedBuf::new(BLOCK);
        let _first = b.claim(0, 64);
        let _second = b.claim(32, 64);
    }

    #[test]
    #[should_panic(expected = "overlaps a claim")]
    fn the_owners_tail_never_reaches_into_a_claim() {
        let mut b = AlignedBuf::new(BLOCK);
        let _slot = b.claim(0, 64);
        let _ = b.tail_mut(63);
    }
}
