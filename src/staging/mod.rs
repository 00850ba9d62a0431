//! staging — batch buffers: one slab per batch laid out [labels i64×B][indices i64×B][pad to 256][images] —
//! with `views=`, the images are one 256-aligned block per view, back to back ([`BatchLayout`]) —
//! page-aligned and prefaulted at allocation (never per batch). The GPU path swaps the allocation for pinned,
//! NUMA-local memory without changing the layout or the row-claiming protocol below.
//!
//! Pinned backend (GPU path): a thread that enters a [`PinningScope`] for device g makes every slab it
//! allocates page-locked for DMA. How: the usual page-aligned allocation, then *prefault* (touch one byte
//! per page from this thread, so first-touch places every page under the thread's memory policy — the
//! GPU's NUMA node when the caller bound itself with `set_mempolicy`), then `cuMemHostRegister(PORTABLE)`.
//! Why register rather than `cuMemHostAlloc`: with register, *we* fault the pages in on the bound thread,
//! so their NUMA placement is ours, not the driver's. Why not write-combined: WC (cudarc's
//! `alloc_pinned` default) makes every CPU read uncached (the consumer reads labels/indices back; the
//! fused writer's NCHW planes are partial-line writes) and registered memory cannot be WC anyway; for
//! DMA, cached pinned pages reach the same PCIe rate. If registration fails (no driver, RLIMIT_MEMLOCK)
//! the slab stays ordinary pageable memory: copies still work, only slower — never an error.
//!
//! Row protocol: while a buffer is in the station's ring for batch b, each row is written by exactly one
//! worker (static claiming or the fast-mode ticket decides which). `claim_row` enforces it at run time with
//! one atomic swap per row, so the `&mut [u8]` it hands out can never alias another writer's. Readers (the
//! consumer's lease) only see the buffer after the station marked it ready, i.e. after every writer's
//! `complete` (a mutex release → acquire edge); nobody claims rows of a buffer outside the ring.

#![allow(unsafe_code)]

use crate::augment::views::{MAX_VIEWS, ViewTargets};
use crate::cuda::{GpuContext, HostRegistration};
use crate::error::{Result, TrdataError};
use crate::sample::RowFields;
use crate::sync::{AtomicBool, Ordering};
use std::alloc::{Layout as AllocLayout, alloc_zeroed, dealloc};
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc as StdArc;

thread_local! {
    /// The device whose DMA engine will read slabs allocated by this thread (set by [`PinningScope`]).
    static PINNING: RefCell<Option<StdArc<GpuContext>>> = const { RefCell::new(None) };
}

/// While alive, slabs allocated by the current thread are pinned for `ctx`'s device (see the module docs).
/// Scopes nest; dropping restores the previous setting. Not `Send`: it describes this thread.
#[derive(Debug)]
pub struct PinningScope {
    previous: Option<StdArc<GpuContext>>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl PinningScope {
    /// Pin this thread's future slab allocations for `ctx`.
    pub fn enter(ctx: StdArc<GpuContext>) -> Self {
        let previous = PINNING.with(|p| p.borrow_mut().replace(ctx));
        Self { previous, _not_send: std::marker::PhantomData }
    }
}

impl Drop for PinningScope {
    fn drop(&mut self) {
        let prev = self.previous.take();
        PINNING.with(|p| *p.borrow_mut() = prev);
    }
}

/// Alignment of the image block (cache lines, DMA-friendly, what the seed used).
pub const IMAGE_ALIGN_BYTES: usize = 256;
const PAGE_BYTES: usize = 4096;

/// Byte layout of one batch buffer: [labels i64×B][indices i64×B][pad to 256][view 0: B × bytes₀][pad to 256]
/// [view 1: B × bytes₁]…. A loader without views has one view, so its layout is the single image block it always
/// had. Every view block starts 256-byte aligned (DLPack consumers and vector loads want aligned tensors), and
/// the host slab, the device slot and the one H2D copy all carry the whole layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLayout {
    rows: usize,
    /// Bytes of one image of each view (the first `view_count` entries).
    view_bytes: [usize; MAX_VIEWS],
    view_count: usize,
}

impl BatchLayout {
    /// One image block of `rows` rows of `sample_bytes` bytes (a loader without views).
    pub const fn new(rows: usize, sample_bytes: usize) -> Self {
        let mut view_bytes = [0; MAX_VIEWS];
        view_bytes[0] = sample_bytes;
        Self { rows, view_bytes, view_count: 1 }
    }

    /// One block per view, view `k`'s images `view_bytes[k]` bytes each. Panics unless 1 ≤ views ≤
    /// `MAX_VIEWS` (the `views` rule, checked when the loader's views were compiled).
    pub fn with_views(rows: usize, view_bytes: &[usize]) -> Self {
        assert!((1..=MAX_VIEWS).contains(&view_bytes.len()), "1 to {MAX_VIEWS} views, not {}", view_bytes.len());
        let mut table = [0; MAX_VIEWS];
        table[..view_bytes.len()].copy_from_slice(view_bytes);
        Self { rows, view_bytes: table, view_count: view_bytes.len() }
    }

    /// Rows (batch size B).
    pub const fn rows(&self) -> usize {
        self.rows
    }
    /// Views per row (1 without views).
    pub const fn views(&self) -> usize {
        self.view_count
    }
    /// Bytes of one image of view `view`.
    pub fn view_bytes(&self, view: usize) -> usize {
        assert!(view < self.view_count, "view {view} of {}", self.view_count);
        self.view_bytes[view]
    }
    /// Bytes of one row's images, all views together.
    pub fn sample_bytes(&self) -> usize {
        self.view_bytes[..self.view_count].iter().sum()
    }
    /// Offset of the labels (i64 × rows).
    pub const fn labels_offset(&self) -> usize {
        0
    }
    /// Offset of the dataset indices (i64 × rows).
    pub const fn indices_offset(&self) -> usize {
        self.rows * 8
    }
    /// Offset of the first image (view 0's block), 256-byte aligned.
    pub const fn images_offset(&self) -> usize {
        (self.rows * 16).next_multiple_of(IMAGE_ALIGN_BYTES)
    }
    /// Offset of view `view`'s block, 256-byte aligned (view 0: `images_offset`).
    pub fn view_offset(&self, view: usize) -> usize {
        assert!(view < self.view_count, "view {view} of {}", self.view_count);
        let before: usize =
            self.view_bytes[..view].iter().map(|&b| (self.rows * b).next_multiple_of(IMAGE_ALIGN_BYTES)).sum();
        self.images_offset() + before
    }
    /// Bytes from the slab's start to the end of the last view's first `rows` images: what a batch of `rows`
    /// rows occupies (and the H2D copy carries; earlier views' blocks are whole, their unused rows unread).
    pub fn used_bytes(&self, rows: usize) -> usize {
        let last = self.view_count - 1;
        self.view_offset(last) + rows.min(self.rows) * self.view_bytes[last]
    }
    /// Total bytes of the slab.
    pub fn total_bytes(&self) -> usize {
        self.used_bytes(self.rows)
    }

    /// Total bytes of the slab rounded up to whole pages, or None when it does not fit in `usize` (checked
    /// once, when the loader is built, so that the unchecked accessors above cannot overflow afterwards).
    pub fn checked_total_bytes(&self) -> Option<usize> {
        let mut end = self.rows.checked_mul(16)?.checked_next_multiple_of(IMAGE_ALIGN_BYTES)?;
        for (k, &b) in self.view_bytes[..self.view_count].iter().enumerate() {
            let block = self.rows.checked_mul(b)?;
            end = end.checked_add(if k + 1 < self.view_count {
                block.checked_next_multiple_of(IMAGE_ALIGN_BYTES)?
            } else {
                block
            })?;
        }
        end.checked_next_multiple_of(PAGE_BYTES)
    }
}

/// A page-aligned, zero-filled (so prefaulted) host allocation; page-locked when allocated inside a
/// [`PinningScope`].
#[derive(Debug)]
pub struct HostSlab {
    ptr: NonNull<u8>,
    len: usize,
    /// Dropped (unregistered) before the memory is freed.
    pinned: Option<HostRegistration>,
}

// SAFETY: HostSlab owns its allocation exclusively, like a Box<[u8]>; concurrent access goes through
// BatchBuffer's row claiming, which hands out disjoint ranges only.
unsafe impl Send for HostSlab {}
// SAFETY: shared references only read through `as_ptr`/`bytes`, whose callers uphold the station protocol.
unsafe impl Sync for HostSlab {}

impl HostSlab {
    /// Allocate `len` bytes (≥ 1), page-aligned and zeroed. Fallible: an allocation the system refuses is a
    /// `TrdataError::Memory` naming `what`, never an abort (sizes come from user configuration).
    pub fn new(len: usize, what: &str) -> Result<Self> {
        let len = len.max(1);
        let oom = || TrdataError::Memory { what: what.to_string(), bytes: len as u64 };
        let layout = AllocLayout::from_size_align(len, PAGE_BYTES).map_err(|_| oom())?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(oom)?;
        let pinned = PINNING.with(|p| p.borrow().clone()).and_then(|ctx| {
            // Prefault from this (NUMA-bound) thread: first touch decides the page's node.
            for off in (0..len).step_by(PAGE_BYTES) {
                // SAFETY: off < len, inside the allocation; a volatile write of 0 keeps the zeroed content
                // and cannot be optimized away.
                unsafe { std::ptr::write_volatile(raw.add(off), 0) };
            }
            // SAFETY: the range is our live allocation; the registration is dropped before the memory
            // (HostSlab::drop).
            unsafe { HostRegistration::register(&ctx, raw, len) }.ok()
        });
        Ok(Self { ptr, len, pinned })
    }

    /// True when the slab is page-locked for DMA.
    pub fn is_pinned(&self) -> bool {
        self.pinned.is_some()
    }

    /// Start of the allocation.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty (allocations are ≥ 1 byte).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for HostSlab {
    fn drop(&mut self) {
        drop(self.pinned.take());
        let layout = AllocLayout::from_size_align(self.len, PAGE_BYTES).expect("layout was valid at allocation");
        // SAFETY: ptr came from alloc_zeroed with this exact layout and is freed once.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

/// One batch's memory plus its row claims.
#[derive(Debug)]
pub struct BatchBuffer {
    slab: HostSlab,
    layout: BatchLayout,
    claimed: Box<[AtomicBool]>,
    /// Each row's targets and extras (sample/), set by its writer beside the image and taken by the consumer of
    /// the published batch. A mutex per row, never contended: the row's claim orders the writer, and the
    /// station's publication orders the consumer after it (module protocol), as for the slab's bytes.
    fields: Box<[std::sync::Mutex<RowFields>]>,
}

/// The writable parts of one row, handed to exactly one worker: the row's image in every view block, its
/// label and its index.
pub struct RowWriter<'a> {
    /// Start of the slab; the row's images are reached through `layout` (see [`RowWriter::image`]).
    base: *mut u8,
    layout: BatchLayout,
    row: usize,
    label: &'a mut [u8],
    index: &'a mut [u8],
    fields: &'a std::sync::Mutex<RowFields>,
}

impl RowWriter<'_> {
    /// Set the row's targets and extras (made by the worker that made its image; replaced by a later write of
    /// the row).
    pub fn set_fields(&mut self, fields: RowFields) {
        *self.fields.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = fields;
    }

    /// The image bytes of view `view` of the row (`layout.view_bytes(view)` long; view 0 is the only one of a
    /// loader without views).
    pub fn image(&mut self, view: usize) -> &mut [u8] {
        let (off, len) =
            (self.layout.view_offset(view) + self.row * self.layout.view_bytes(view), self.layout.view_bytes(view));
        // SAFETY: the range lies inside the slab (view_offset + row·bytes + bytes ≤ total_bytes, row < rows) and
        // is disjoint from every other row's ranges and from the label/index bytes; `claim_row`'s atomic swap
        // made this writer the row's only one, and `&mut self` makes the returned slice the only live borrow of
        // it (one view at a time).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) }
    }

    /// Zero the row's images in every view (a failed sample under `on_error='raise'`).
    pub fn clear_images(&mut self) {
        for v in 0..self.layout.views() {
            self.image(v).fill(0);
        }
    }

    /// Record the row's label and dataset index.
    pub fn set_meta(&mut self, label: i64, index: i64) {
        self.label.copy_from_slice(&label.to_ne_bytes());
        self.index.copy_from_slice(&index.to_ne_bytes());
    }
}

/// The augment stage writes a row's views straight into their blocks.
impl ViewTargets for RowWriter<'_> {
    fn view_mut(&mut self, view: usize) -> &mut [u8] {
        self.image(view)
    }
}

impl BatchBuffer {
    /// Allocate a buffer for `layout` (`TrdataError::Memory` when the system refuses; the caller checked
    /// that `layout.total_bytes()` does not overflow, see [`BatchLayout::checked_total_bytes`]).
    pub fn new(layout: BatchLayout) -> Result<Self> {
        let mut claimed = Vec::new();
        claimed
            .try_reserve_exact(layout.rows)
            .map_err(|_| TrdataError::Memory { what: "batch row claims".into(), bytes: layout.rows as u64 })?;
        claimed.extend((0..layout.rows).map(|_| AtomicBool::new(false)));
        let slab = HostSlab::new(layout.total_bytes(), "a batch buffer")?;
        let fields = (0..layout.rows).map(|_| std::sync::Mutex::new(RowFields::default())).collect();
        Ok(Self { slab, layout, claimed: claimed.into_boxed_slice(), fields })
    }

    /// The layout.
    pub fn layout(&self) -> BatchLayout {
        self.layout
    }

    /// Forget all claims; called by the station when the buffer (re-)enters the ring, when no writer or
    /// reader of its previous batch is left.
    pub fn reset_claims(&self) {
        for c in self.claimed.iter() {
            c.store(false, Ordering::Relaxed);
        }
        for f in self.fields.iter() {
            *f.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = RowFields::default();
        }
    }

    /// The targets and extras of the first `rows` rows of a published batch, taken (empty for a row whose
    /// writer set none).
    pub fn take_fields(&self, rows: usize) -> Vec<RowFields> {
        (self.fields.iter().take(rows))
            .map(|f| std::mem::take(&mut *f.lock().unwrap_or_else(std::sync::PoisonError::into_inner)))
            .collect()
    }

    /// Claim row `row` for writing. Panics if the row was already claimed in this round — that would be a
    /// claiming bug, and two writers must never share the memory.
    pub fn claim_row(&self, row: usize) -> RowWriter<'_> {
        assert!(row < self.layout.rows, "row {row} outside batch of {}", self.layout.rows);
        let was = self.claimed[row].swap(true, Ordering::AcqRel);
        assert!(!was, "row {row} claimed twice: claiming protocol violated");
        let l = self.layout;
        let base = self.slab.ptr.as_ptr();
        // SAFETY: both ranges lie inside the slab (offsets from BatchLayout, row < rows) and are disjoint from
        // every other row's ranges; the atomic swap above makes this the only live writer of them, and readers
        // only exist after the station published the batch (see the module protocol). The images are reached
        // later, one view at a time, through `RowWriter::image` under the same claim.
        unsafe {
            RowWriter {
                base,
                layout: l,
                row,
                label: std::slice::from_raw_parts_mut(base.add(l.labels_offset() + row * 8), 8),
                index: std::slice::from_raw_parts_mut(base.add(l.indices_offset() + row * 8), 8),
                fields: &self.fields[row],
            }
        }
    }

    /// Start of the slab (labels first), for the H2D copy of a published batch.
    pub fn slab_ptr(&self) -> *const u8 {
        self.slab.as_ptr()
    }

    /// Bytes of the slab a batch of `rows` rows uses: metadata, pad and `rows` images of every view
    /// ([`BatchLayout::used_bytes`]).
    pub fn used_bytes(&self, rows: usize) -> usize {
        self.layout.used_bytes(rows)
    }

    /// True when the slab is page-locked (allocated inside a [`PinningScope`] and registered).
    pub fn is_pinned(&self) -> bool {
        self.slab.is_pinned()
    }

    /// Pointer to the first image (view 0's block; for numpy/DLPack views of a published batch).
    pub fn images_ptr(&self) -> *const u8 {
        self.view_ptr(0)
    }

    /// Pointer to the first image of view `view`'s block (numpy/DLPack views of one view of a published batch).
    pub fn view_ptr(&self, view: usize) -> *const u8 {
        // SAFETY: view_offset(view) ≤ total length of the slab (BatchLayout; view < views, checked there).
        unsafe { self.slab.as_ptr().add(self.layout.view_offset(view)) }
    }

    /// Labels and indices of the first `rows` rows of a published batch.
    pub fn labels_and_indices(&self, rows: usize) -> (Vec<i64>, Vec<i64>) {
        let rows = rows.min(self.layout.rows);
        let base = self.slab.as_ptr();
        let read = |off: usize, r: usize| {
            let mut b = [0u8; 8];
            // SAFETY: off + r*8 + 8 ≤ slab length; a published batch has no writers (module protocol).
            unsafe { std::ptr::copy_nonoverlapping(base.add(off + r * 8), b.as_mut_ptr(), 8) };
            i64::from_ne_bytes(b)
        };
        let l = self.layout;
        (
            (0..rows).map(|r| read(l.labels_offset(), r)).collect(),
            (0..rows).map(|r| read(l.indices_offset(), r)).collect(),
        )
    }

    /// Image bytes of the first `rows` rows of a published batch (view 0: all of them without views).
    pub fn images(&self, rows: usize) -> &[u8] {
        self.view_images(0, rows)
    }

    /// View `view`'s image bytes of the first `rows` rows of a published batch.
    pub fn view_images(&self, view: usize, rows: usize) -> &[u8] {
        let len = rows.min(self.layout.rows) * self.layout.view_bytes(view);
        // SAFETY: in bounds (BatchLayout); only called on published batches, which have no writers (module
        // protocol).
        unsafe { std::slice::from_raw_parts(self.view_ptr(view), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_aligned_and_rows_are_disjoint() {
        let l = BatchLayout::new(3, 10);
        assert_eq!(l.images_offset() % IMAGE_ALIGN_BYTES, 0);
        let b = BatchBuffer::new(l).unwrap();
        assert_eq!(b.images_ptr() as usize % IMAGE_ALIGN_BYTES, 0);
        for r in 0..3 {
            let mut w = b.claim_row(r);
            w.image(0).fill(r as u8 + 1);
            w.set_meta(100 + r as i64, 7 - r as i64);
        }
        assert_eq!(b.images(3), &[1u8; 10].iter().chain(&[2u8; 10]).chain(&[3u8; 10]).copied().collect::<Vec<_>>()[..]);
        assert_eq!(b.labels_and_indices(3), (vec![100, 101, 102], vec![7, 6, 5]));
    }

    /// Views: each block 256-aligned after the previous one, rows of different views never overlap, the used
    /// bytes of a short batch reach exactly the last view's last used row, and a one-view layout is the
    /// single-block layout byte for byte.
    #[test]
    fn view_blocks_are_aligned_and_disjoint() {
        let l = BatchLayout::with_views(3, &[10, 7, 5]);
        assert_eq!((l.views(), l.sample_bytes(), l.images_offset()), (3, 22, 256));
        assert_eq!([l.view_offset(0), l.view_offset(1), l.view_offset(2)], [256, 512, 768]);
        assert_eq!((l.total_bytes(), l.used_bytes(1)), (768 + 15, 768 + 5));
        assert_eq!(l.checked_total_bytes(), Some(4096));
        let b = BatchBuffer::new(l).unwrap();
        for r in 0..3 {
            let mut w = b.claim_row(r);
            for v in 0..3 {
                assert_eq!(w.image(v).len(), [10, 7, 5][v]);
                w.image(v).fill((10 * v + r) as u8 + 1);
            }
        }
        for v in 0..3 {
            assert_eq!(b.view_ptr(v) as usize % IMAGE_ALIGN_BYTES, 0);
            let want: Vec<u8> = (0..3).flat_map(|r| vec![(10 * v + r) as u8 + 1; [10, 7, 5][v]]).collect();
            assert_eq!(b.view_images(v, 3), &want[..], "view {v}");
        }
        b.reset_claims();
        {
            let mut row = b.claim_row(1);
            row.clear_images();
            assert!((0..3).all(|v| row.image(v).iter().all(|&x| x == 0)));
        }
        assert!(b.view_images(2, 3)[..5].iter().all(|&x| x == 21), "other rows untouched");
        assert_eq!(BatchLayout::with_views(3, &[10]), BatchLayout::new(3, 10));
        assert_eq!(BatchLayout::with_views(1 << 20, &[1, 1 << 50]).checked_total_bytes(), None);
    }

    #[test]
    fn absurd_sizes_are_memory_errors_not_aborts() {
        match HostSlab::new(1 << 62, "a test slab") {
            Err(TrdataError::Memory { what, bytes }) => assert_eq!((what.as_str(), bytes), ("a test slab", 1 << 62)),
            other => panic!("expected a memory error, got {other:?}"),
        }
        let l = BatchLayout::new(1 << 20, 1 << 50);
        assert_eq!(l.checked_total_bytes(), None, "2^70 bytes must not wrap around");
        assert!(matches!(BatchBuffer::new(BatchLayout::new(2, 1 << 60)), Err(TrdataError::Memory { .. })));
        assert_eq!(BatchLayout::new(3, 10).checked_total_bytes(), Some(4096));
    }

    #[test]
    #[should_panic(expected = "claimed twice")]
    fn double_claim_panics() {
        let b = BatchBuffer::new(BatchLayout::new(2, 4)).unwrap();
        let _a = b.claim_row(1);
        let _b = b.claim_row(1);
    }
}
