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
//!
//! It also gives back the executable's pages that only start-up used
//! ([`page_out_executable`]), once the host is ready.

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

/// Asks the kernel to reclaim the pages of this process's executable that
/// are mapped read-only (code and read-only data), once start-up is over.
///
/// A fault on the executable maps the whole 64 KiB around it (the kernel's
/// fault-around), so the host started with ~15 MiB of its executable
/// resident although it had used ~7 MiB, and idle it uses ~0.25 MiB
/// (docs/performance.md, "A lighter replica"). `MADV_PAGEOUT` reclaims
/// those that no other process maps (clean file pages: nothing is written);
/// what the host runs next is faulted in again from the page cache or the
/// file. Returns the bytes advised (0 where the call is not available).
pub fn page_out_executable() -> std::io::Result<u64> {
    #[cfg(target_os = "linux")]
    {
        let exe = std::fs::read_link("/proc/self/exe")?;
        let maps = std::fs::read_to_string("/proc/self/maps")?;
        let mut advised = 0;
        for (start, end) in read_only_mappings_of(&maps, &exe.to_string_lossy()) {
            let len = end - start;
            // SAFETY: the range is a whole mapping of this process, read
            // from /proc/self/maps; MADV_PAGEOUT only drops pages from it
            // (they fault in again on the next access) and changes no
            // contents. A range unmapped meanwhile makes the call fail,
            // which is reported and harmless.
            let done =
                unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_PAGEOUT) };
            if done != 0 {
                return Err(std::io::Error::last_os_error());
            }
            advised += len as u64;
        }
        Ok(advised)
    }
    #[cfg(not(target_os = "linux"))]
    Ok(0)
}

/// The `(start, end)` of each read-only, private mapping of the file `path`
/// in the text of `/proc/self/maps` (its code `r-xp` and read-only data
/// `r--p`; never a writable one).
fn read_only_mappings_of(maps: &str, path: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            // offset, device, inode, then the path (which may hold spaces).
            let file = line.splitn(6, char::is_whitespace).nth(5)?.trim_start();
            if file != path || !(perms == "r-xp" || perms == "r--p") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_read_only_mappings_are_paged_out() {
        let maps = "\
5581a0000000-5581a0640000 r--p 00000000 fd:00 123 /usr/bin/wasm-operator
5581a0640000-5581a1e60000 r-xp 00640000 fd:00 123 /usr/bin/wasm-operator
5581a1e60000-5581a1ef8000 rw-p 01e60000 fd:00 123 /usr/bin/wasm-operator
7f0000000000-7f0000100000 r-xp 00000000 fd:00 456 /usr/lib/libc.so.6
7f0000200000-7f0000300000 r-xp 00000000 fd:00 789 /usr/bin/wasm-operator-other
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
";
        assert_eq!(
            read_only_mappings_of(maps, "/usr/bin/wasm-operator"),
            [
                (0x5581a0000000, 0x5581a0640000),
                (0x5581a0640000, 0x5581a1e60000)
            ]
        );
        assert!(read_only_mappings_of(maps, "/nowhere").is_empty());
    }

    #[test]
    fn paging_out_this_test_binary_works_and_it_keeps_running() {
        let advised = page_out_executable().expect("madvise");
        assert!(advised > 0, "no read-only mapping of the test binary found");
        // The code just paged out (this test's included) runs again.
        assert_eq!(page_out_executable().expect("madvise again"), advised);
    }
}
