use std::alloc::{self, Layout};
use std::ptr::NonNull;
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
}

/// A heap allocation freed when the last holder lets go.
pub(crate) struct Allocation {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: an Allocation is a pointer and a layout; holders other than the
// owning AlignedBuf never dereference it, and freeing from any thread is
// allowed by the global allocator.
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
        AlignedBuf {
            ptr,
            cap,
            alloc: Arc::new(Allocation { ptr, layout }),
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

    /// The whole buffer as a byte slice.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to `cap` initialised (zeroed at allocation)
        // bytes owned by self; the borrow of self bounds the lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }

    /// The whole buffer as a mutable byte slice.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    /// Raw pointer for kernel submissions; valid while `self` is alive and
    /// not moved out of its heap allocation (moving the `AlignedBuf` value
    /// itself does not move the bytes).
    #[cfg(target_os = "linux")]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
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
        assert_eq!(b.as_ptr() as usize % BLOCK, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[8191] = 7;
        assert_eq!(b.as_slice()[8191], 7);
        assert_eq!(AlignedBuf::new(0).capacity(), BLOCK);
    }
}
