//! A global allocator that aborts on an allocation a corrupted input could have asked for:
//! any single allocation over [`MAX_ALLOCATION`], or more than [`MAX_LIVE`] bytes live at
//! once. Installed by the short-run tests and by every libFuzzer target, so "unbounded
//! allocation" is a crash the fuzzer reports with its input, like a panic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// No parser here needs more for one input: bodies are capped at 20 MiB.
pub const MAX_ALLOCATION: usize = 256 << 20;
pub const MAX_LIVE: usize = 1 << 30;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static INPUT: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);

pub struct Capped;

/// Records the input being run, printed (hex) if it makes an allocation over the cap.
pub fn set_input(input: &[u8]) {
    INPUT.store(input.as_ptr() as *mut u8, Ordering::Relaxed);
    INPUT_LEN.store(input.len(), Ordering::Relaxed);
}

pub fn clear_input() {
    INPUT_LEN.store(0, Ordering::Relaxed);
}

/// Writes without allocating, then aborts.
#[cold]
fn over_cap(size: usize) -> ! {
    let mut err = std::io::stderr();
    let mut digits = [0u8; 20];
    let mut n = size;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let _ = err.write_all(b"\nallocation over the fuzzing cap: ");
    let _ = err.write_all(&digits[i..]);
    let _ = err.write_all(b" bytes requested\n");
    let len = INPUT_LEN.load(Ordering::Relaxed);
    let ptr = INPUT.load(Ordering::Relaxed);
    if len > 0 && !ptr.is_null() {
        // SAFETY: set_input stored a slice that outlives the run of the target.
        let input = unsafe { std::slice::from_raw_parts(ptr, len.min(4096)) };
        let _ = err.write_all(b"input (hex): ");
        for b in input {
            let hex = b"0123456789abcdef";
            let _ = err.write_all(&[hex[(b >> 4) as usize], hex[(b & 15) as usize]]);
        }
        let _ = err.write_all(b"\n");
    }
    std::process::abort()
}

fn admit(size: usize) {
    if size > MAX_ALLOCATION || LIVE.fetch_add(size, Ordering::Relaxed) + size > MAX_LIVE {
        over_cap(size)
    }
}

// SAFETY: every call goes to System with the same layout; only counts are added.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        admit(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        admit(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        admit(new_size);
        System.realloc(ptr, layout, new_size)
    }
}
