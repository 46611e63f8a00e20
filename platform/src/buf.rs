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

/// One buffer's share of a [`Region`]: the memory stays allocated while
/// any holder of either is left.
pub(crate) struct Allocation {
    /// Slots of the buffer handed out and not yet released: kept here so
    /// that a slot holds one reference count, not two.
    claims: AtomicUsize,
    /// The memory the buffer lies in, shared by the buffers carved from it.
    /// Held, never read: its drop frees the memory.
    _region: Arc<Region>,
}

/// Memory from the global allocator, zeroed, freed when the last buffer
/// carved from it (and every holder of one's [`Allocation`]) lets go.
struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a Region is a pointer and a layout; nothing dereferences it
// through the Region (its buffers own their disjoint ranges), and the
// global allocator allows freeing from any thread.
unsafe impl Send for Region {}
// SAFETY: as above: shared references never touch the bytes.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout in
        // `Region::zeroed`, and this is the last holder.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: AlignedBuf is the only user of its range's bytes, like a
// Vec<u8>; moving it between threads moves that exclusive use.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`, which is Sync for u8.
unsafe impl Sync for AlignedBuf {}

/// Bytes of a transparent huge page on x86-64 and arm64 Linux.
const HUGE_PAGE: usize = 2 << 20;

/// Regions of at least this many bytes are made of whole huge pages
/// (Linux; elsewhere, and below this, of ordinary pages). Why: a disk
/// takes a bounded number of memory segments per request (254 on the
/// virtio disk of docs/benchmarks.md), and each 4 KiB page is one
/// unless its neighbour happens to be physically next to it, so a
/// staging buffer's 1 MiB + 12 KiB write went to the device as two
/// requests (1,040,384 and 12,288 bytes, in a block trace). From huge
/// pages it is one, and `ringwal bench` with 1 MiB records from 4
/// producers went from 3,454-4,476 to 5,119-5,878 records/s (write p50
/// 755-990 us to 512-627 us). Cost: a region is rounded up to whole
/// huge pages (at most 2 MiB - 4 KiB of slack), faulted in whole at
/// allocation (a memset) instead of page by page on first use.
const HUGE_FROM: usize = 1 << 20;
const _: () = assert!(HUGE_FROM <= HUGE_PAGE && HUGE_PAGE.is_multiple_of(BLOCK));

impl Region {
    /// `bytes` (a non-zero multiple of [`BLOCK`]) of zeroed memory,
    /// aligned to a block, or made of huge pages from [`HUGE_FROM`]
    /// bytes. Panics if the allocation fails, like `Vec` does.
    fn zeroed(bytes: usize) -> Arc<Region> {
        assert!(
            bytes >= BLOCK && bytes.is_multiple_of(BLOCK),
            "region of {bytes} bytes is not a whole number of blocks"
        );
        let huge = cfg!(target_os = "linux") && bytes >= HUGE_FROM;
        let layout = if huge {
            Layout::from_size_align(bytes.next_multiple_of(HUGE_PAGE), HUGE_PAGE)
        } else {
            Layout::from_size_align(bytes, BLOCK)
        }
        .expect("aligned buffer layout");
        // SAFETY: layout has a non-zero size (bytes >= BLOCK).
        let raw = unsafe {
            if huge {
                alloc::alloc(layout)
            } else {
                alloc::alloc_zeroed(layout)
            }
        };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        if huge {
            advise_huge(ptr, layout.size());
            // SAFETY: ptr points to layout.size() bytes just allocated and
            // not yet shared; writing zeroes initialises them (and faults
            // them in, as huge pages where the kernel gave them).
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, layout.size()) };
        }
        // What O_DIRECT and a registered write rely on, and what every
        // whole-block prefix write relies on to stay inside the buffer.
        assert!(
            ptr.as_ptr().addr().is_multiple_of(BLOCK),
            "allocator returned {:p}, not aligned to {BLOCK}",
            ptr.as_ptr()
        );
        Arc::new(Region { ptr, layout })
    }
}

/// Ask for huge pages under `len` bytes at `ptr` (huge-page aligned, not
/// yet touched). Best effort: where the kernel keeps them for `madvise`
/// only, this is what makes it use them; where it refuses (huge pages
/// off, a kernel without them), ordinary pages serve. Cost: one syscall.
#[cfg(target_os = "linux")]
fn advise_huge(ptr: NonNull<u8>, len: usize) {
    // SAFETY: [ptr, ptr + len) is one allocation of this process, aligned
    // to a page; MADV_HUGEPAGE changes only how it is backed, not its
    // contents or validity.
    let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_ptr: NonNull<u8>, _len: usize) {}

impl AlignedBuf {
    /// Allocate a zeroed buffer of at least `cap` bytes (rounded up to a
    /// multiple of [`BLOCK`], minimum one block); from 1 MiB, of huge
    /// pages where Linux gives them (see [`AlignedBuf::many`]).
    ///
    /// Panics if the allocation fails, like `Vec` does.
    pub fn new(cap: usize) -> AlignedBuf {
        let cap = Self::rounded(cap);
        let region = Region::zeroed(cap);
        let ptr = region.ptr;
        AlignedBuf::carved(ptr, cap, region)
    }

    /// `n` zeroed buffers of `cap` bytes each (rounded as in
    /// [`new`](Self::new)), lying side by side in one region of memory.
    /// From 1 MiB in all, the region is made of huge pages where Linux
    /// gives them: a write from one of the buffers is then one or two
    /// physically contiguous pieces, which a disk takes as one request
    /// (see docs/benchmarks-history.md, "Staging buffers of huge pages").
    ///
    /// Cost: one allocation of `n * cap` bytes rounded up to whole huge
    /// pages, zeroed at once, and one reference count per buffer. Panics
    /// if the allocation fails.
    pub fn many(n: usize, cap: usize) -> Vec<AlignedBuf> {
        let cap = Self::rounded(cap);
        let total = cap.checked_mul(n.max(1)).expect("buffers' size overflows");
        let region = Region::zeroed(total);
        (0..n)
            .map(|i| {
                // SAFETY: i * cap + cap <= total, the region's size, so the
                // pointer stays inside it.
                let ptr = unsafe { NonNull::new_unchecked(region.ptr.as_ptr().add(i * cap)) };
                AlignedBuf::carved(ptr, cap, region.clone())
            })
            .collect()
    }

    fn rounded(cap: usize) -> usize {
        cap.max(1).div_ceil(BLOCK) * BLOCK
    }

    /// The buffer of `cap` bytes at `ptr`, its own range of `region`.
    fn carved(ptr: NonNull<u8>, cap: usize, region: Arc<Region>) -> AlignedBuf {
        debug_assert!(
            ptr.as_ptr().addr() + cap <= region.ptr.as_ptr().addr() + region.layout.size(),
            "a buffer lies inside its region"
        );
        assert!(
            ptr.as_ptr().addr().is_multiple_of(BLOCK) && cap >= BLOCK && cap.is_multiple_of(BLOCK),
            "buffer at {:p} of {cap} bytes is not whole aligned blocks",
            ptr.as_ptr()
        );
        AlignedBuf {
            ptr,
            cap,
            alloc: Arc::new(Allocation {
                claims: AtomicUsize::new(0),
                _region: region,
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
    fn many_buffers_share_a_region_without_overlapping() {
        // 3 x (1 MiB + 12 KiB): past HUGE_FROM, so a huge-page region.
        let cap = (1 << 20) + 3 * BLOCK;
        let mut bufs = AlignedBuf::many(3, cap - 100);
        assert_eq!(bufs.len(), 3);
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.capacity(), cap);
            assert_eq!(b.addr() % BLOCK, 0);
            assert!(b.as_slice().iter().all(|&x| x == 0), "buffer {i} is zeroed");
            b.as_mut_slice().fill(i as u8 + 1);
        }
        let mut addrs: Vec<usize> = bufs.iter().map(|b| b.addr()).collect();
        addrs.sort_unstable();
        assert!(
            addrs.windows(2).all(|w| w[1] - w[0] >= cap),
            "ranges overlap"
        );
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.as_slice().iter().all(|&x| x == i as u8 + 1),
                "buffer {i} kept its bytes"
            );
        }
        // A holder of one buffer's allocation (a queue's registration)
        // keeps the region alive after every buffer is gone.
        let held = bufs[1].alloc.clone();
        drop(bufs);
        assert_eq!(held.claims.load(Ordering::SeqCst), 0);
        // Small regions stay on ordinary pages, still aligned and zeroed.
        let small = AlignedBuf::many(4, 100);
        assert!(small
            .iter()
            .all(|b| b.capacity() == BLOCK && b.addr() % BLOCK == 0));
        assert!(AlignedBuf::many(0, 4096).is_empty());
    }

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
