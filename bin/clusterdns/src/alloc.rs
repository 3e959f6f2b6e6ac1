//! The global allocator: mimalloc, asked the way C's `malloc` is whenever
//! the alignment is one `malloc` already guarantees.
//!
//! The `mimalloc` crate hands every request to `mi_malloc_aligned`. For a
//! block over 1 KiB whose size class is not a power of two, mimalloc then
//! takes its over-allocation path (slower, and a larger block) even for an
//! alignment of 8, although `mi_malloc` returns memory aligned to 16 bytes
//! for any size from 16 up (its size classes are multiples of 16 there),
//! and to 8 below. A forwarded query's futures are such blocks. The
//! callgrind counts are in BENCHMARKS.md ("Figures behind design choices").

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The largest alignment `mi_malloc` gives (mimalloc's
/// `MI_MAX_ALIGN_SIZE`, C's `alignof(max_align_t)` on the 64-bit targets
/// we build for).
const MALLOC_ALIGN: usize = 16;

/// Whether a plain `mi_malloc` block of `size` bytes is aligned enough:
/// the rule std's own `System` allocator applies to `malloc` (a block is
/// aligned to the largest power of two up to 16 that divides its size
/// class, which is at least `size`).
fn plain(align: usize, size: usize) -> bool {
    align <= MALLOC_ALIGN && align <= size
}

/// mimalloc as the process's allocator.
pub(crate) struct MiMalloc;

// SAFETY: every method forwards to the mimalloc function with the same
// contract; the unaligned calls are used only where `plain` says their
// blocks are aligned enough, and `mi_free` / `mi_realloc*` accept blocks
// from either family.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for MiMalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_malloc(layout.size())
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align())
            }
        }
        .cast()
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_zalloc(layout.size())
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align())
            }
        }
        .cast()
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (GlobalAlloc's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe {
            if plain(layout.align(), new_size) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size)
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align())
            }
        }
        .cast()
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    use super::MiMalloc;

    /// Every size and alignment comes back aligned and usable, through
    /// both paths, and survives growing and shrinking.
    #[test]
    #[allow(unsafe_code)]
    fn blocks_are_aligned_and_keep_their_bytes() {
        for align in [1usize, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [
                1usize, 2, 7, 8, 12, 16, 24, 40, 100, 1000, 1136, 1256, 5000, 70_000,
            ] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero size; the block is written within
                // `size`, then freed with the same layout.
                unsafe {
                    let p = MiMalloc.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xa5, size);
                    let q = MiMalloc.realloc(p, layout, size * 3);
                    assert_eq!(q as usize % align, 0, "realloc size {size} align {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xa5));
                    MiMalloc.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                    let z = MiMalloc.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    MiMalloc.dealloc(z, layout);
                }
            }
        }
    }
}
