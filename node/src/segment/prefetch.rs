//! Hints that ask the CPU to bring memory into its cache ahead of use. They read nothing and
//! never fault, so they change no result; elsewhere than on x86-64 they do nothing.

/// The cache line holding `p`.
#[inline]
pub fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it dereferences nothing, whatever the pointer.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Every cache line of `value` (not what it points to).
#[inline]
pub fn value<T>(value: &T) {
    lines(std::ptr::from_ref(value).cast(), std::mem::size_of::<T>(), usize::MAX);
}

/// Cache lines of a slice prefetched at most.
const SLICE_LINES: usize = 8;

/// The first cache lines of the elements of `items` (not what they point to).
#[inline]
pub fn slice<T>(items: &[T]) {
    lines(items.as_ptr().cast(), std::mem::size_of_val(items), SLICE_LINES);
}

/// Bytes a text is prefetched up to: its first four cache lines.
const TEXT_LINES: usize = 4;

/// The first cache lines of `bytes`.
#[inline]
pub fn text(bytes: &[u8]) {
    lines(bytes.as_ptr(), bytes.len(), TEXT_LINES);
}

/// At most `most` cache lines of the `len` bytes at `start`, from the start of its line so
/// that the last one is reached too.
#[inline]
fn lines(start: *const u8, len: usize, most: usize) {
    let skew = start as usize % 64;
    let aligned = start.wrapping_sub(skew);
    for offset in (0..(skew + len).min(most.saturating_mul(64))).step_by(64) {
        line(aligned.wrapping_add(offset));
    }
}
