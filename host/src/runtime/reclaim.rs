//! Gives the memory of a large plugin output back to the operating system.
//!
//! A hostile plugin can hand the host a big output (up to
//! `--plugin-output-limit-kib`) that is rejected a moment later. glibc's
//! allocator raises its mmap and trim thresholds after large frees, after
//! which big buffers come from the heap and stay resident when freed: the
//! host's RSS would stay at its high-water mark (measured: +20 MiB after a
//! 200 000-create output, `host/tests/rss.rs`). So the host pins the
//! thresholds at start ([`pin_allocator_thresholds`]: buffers of 1 MiB and
//! more are mapped and unmapped on their own) and, after dropping a large
//! output, asks the allocator to release free pages ([`release_free_memory`],
//! about a millisecond, only for large outputs).

use super::bindings as wit;

/// Outputs with more list items than this count as large.
pub const LARGE_OUTPUT_ITEMS: usize = 10_000;

/// How many list items `output` holds (creates, deletes, podList entries,
/// Events, labels and annotations of the creates).
pub fn output_items(output: &wit::ReconcileOutput) -> usize {
    let creates: usize = output
        .create_pods
        .iter()
        .map(|c| 1 + c.labels.len() + c.annotations.len())
        .sum();
    let pod_list = output.status.as_ref().map_or(0, |s| s.pod_list.len());
    creates + output.delete_pods.len() + pod_list + output.events.len()
}

/// Whether `output` is large enough that dropping it should be followed by
/// [`release_free_memory`].
pub fn is_large(output: &wit::ReconcileOutput) -> bool {
    output_items(output) > LARGE_OUTPUT_ITEMS
}

/// Allocations from this size up get their own mapping, returned to the
/// operating system when freed.
pub const MMAP_THRESHOLD_BYTES: i32 = 1024 * 1024;

/// Fixes glibc's mmap threshold (which also stops it from adjusting the trim
/// threshold). Called once at process start.
pub fn pin_allocator_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets glibc allocator parameters, under the
    // allocator's own locks.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
}

/// Returns the allocator's free pages to the operating system.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only walks glibc's own arenas and has no
    // preconditions; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
