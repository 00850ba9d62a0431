//! The only place that calls libjpeg-turbo (tj3 API of turbojpeg-sys). Every call's return code is checked;
//! failures become `ImageError`s with libjpeg-turbo's message.
//!
//! Handle protocol: one `TjDecompressor` per worker thread (tj handles are not thread-safe, but may move between
//! threads). Each decode sets scaling factor and cropping region explicitly, so no state leaks from the previous
//! image into the next one.
//!
//! **Failure recovery.** A tj3 call that fails *fatally* longjmps out of libjpeg and leaves the instance half-way
//! through a parse: `tj3DecompressHeader` returns without `jpeg_abort_decompress`, so the next image's header is
//! parsed on top of the previous one's tables and state ("Bogus Huffman table definition", "invalid JPEG
//! dimensions -1x-1" on perfectly good files). Only a later *successful* call would reset it, and that never comes.
//! So after every failed call (header fatal error; any non-zero return of a decompress, set-scaling or
//! set-region call) the handle is destroyed and re-created, and the parameters set through [`TjDecompressor::set`]
//! are re-applied: the next image always starts on a handle in the same state as a fresh one. A header call that
//! only *warned* is repeated once on the fresh handle (see [`TjDecompressor::read_header`] for why a "warning" may
//! hide a fatal error), so the cropping call that follows sees this image's header. If re-creation itself fails (`tj3Init` out of memory), the old handle is kept, marked
//! poisoned, and re-creation is retried before the next call; until it succeeds every call fails.
//!
//! **Tables.** libjpeg keeps the DQT/DHT tables of every image a handle parsed (abbreviated datastreams), so an
//! image that uses a table it does not define itself would decode with an earlier image's table. The decoder
//! finds such images with the marker walk it runs anyway (`markers.rs`, `borrows_tables`) and calls
//! [`TjDecompressor::renew`] before decoding them: every decode sees the tables a fresh handle would.

use std::ffi::CStr;
use std::ptr::NonNull;

use turbojpeg_sys as tj;

use crate::error::{ImageError, ImageErrorKind};

/// Raw header values, as reported by `tj3DecompressHeader` + `tj3Get`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawHeader {
    pub width: i32,
    pub height: i32,
    pub subsamp: i32,
    pub colorspace: i32,
    pub precision: i32,
    pub lossless: bool,
    pub progressive: bool,
}

/// How a decode call ended when libjpeg-turbo reported a problem.
pub(crate) enum TjFailure {
    /// TJERR_WARNING: the image was decoded completely, but libjpeg-turbo warned (first warning's message).
    Warning(String),
    /// TJERR_FATAL: nothing usable was produced.
    Fatal(String),
}

/// Cropping region in scaled-image pixels (see `tj3SetCroppingRegion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TjRegion {
    pub x: i32,
    pub y: i32,
    pub w: i32,
    pub h: i32,
}

/// An owned tj3 decompression handle.
pub(crate) struct TjDecompressor {
    handle: NonNull<std::ffi::c_void>,
    /// Every parameter set through `set` (last value wins), re-applied when the handle is re-created.
    params: Vec<(tj::TJPARAM, i32)>,
    /// A failed call could not be followed by re-creation (tj3Init failed): retry before the next call.
    poisoned: bool,
    /// How many times the handle was re-created after a failure (for tests and diagnostics).
    resets: u64,
    /// How many times the handle was re-created before an image that uses tables it does not define
    /// ([`TjDecompressor::renew`]).
    renewals: u64,
}

// SAFETY: a tj3 handle has no thread affinity (no thread-locals tied to it; the thread-local error string is only
// read right after a failing call on the same thread). It is only used through `&mut self`, so it is never used
// from two threads at once. It is therefore sound to move it to another thread (Send) but not to share it (!Sync).
unsafe impl Send for TjDecompressor {}

impl TjDecompressor {
    /// `tj3Init(TJINIT_DECOMPRESS)`.
    pub fn new() -> Result<Self, String> {
        Ok(Self { handle: init_handle()?, params: Vec::new(), poisoned: false, resets: 0, renewals: 0 })
    }

    /// How many times the handle was re-created after a failed call.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// How many times the handle was renewed for an image that borrows tables ([`TjDecompressor::renew`]).
    pub fn renewals(&self) -> u64 {
        self.renewals
    }

    /// Replace the handle by a fresh one carrying the same parameters although nothing failed: libjpeg keeps the
    /// quantization and Huffman tables of every image it parsed in the handle (abbreviated datastreams), and
    /// `jpeg_abort_decompress` does not clear them; only a new instance starts without tables (and with
    /// libjpeg's standard Huffman tables for sequential files that define none). The caller re-reads the header
    /// of the image about to be decoded before setting a cropping region. If `tj3Init` fails the handle is
    /// poisoned, so the next call fails instead of decoding with old tables.
    pub fn renew(&mut self) {
        self.renewals += 1;
        self.replace_handle();
    }

    /// Replace the handle by a fresh one carrying the same parameters (see "Failure recovery" above).
    fn recover(&mut self) {
        self.resets += 1;
        self.replace_handle();
    }

    /// A fresh handle with `params` re-applied; on failure the old one stays, marked poisoned.
    fn replace_handle(&mut self) {
        let fresh = match init_handle() {
            Ok(h) => h,
            Err(_) => {
                self.poisoned = true;
                return;
            }
        };
        for &(param, value) in &self.params {
            // SAFETY: `fresh` is a live handle from tj3Init; the values were accepted by tj3Set before.
            let rc = unsafe { tj::tj3Set(fresh.as_ptr(), param as libc::c_int, value) };
            if rc != 0 {
                // SAFETY: `fresh` came from tj3Init and is not used after this.
                unsafe { tj::tj3Destroy(fresh.as_ptr()) };
                self.poisoned = true;
                return;
            }
        }
        let old = std::mem::replace(&mut self.handle, fresh);
        // SAFETY: `old` came from tj3Init, was owned exclusively by self and is no longer reachable.
        unsafe { tj::tj3Destroy(old.as_ptr()) };
        self.poisoned = false;
    }

    /// Before a call: a poisoned handle must be re-created first.
    fn ensure_usable(&mut self) -> Result<(), String> {
        if self.poisoned {
            self.recover();
            if self.poisoned {
                return Err("libjpeg-turbo handle could not be re-created after a failure (tj3Init failed)".into());
            }
        }
        Ok(())
    }

    fn raw(&self) -> tj::tjhandle {
        self.handle.as_ptr()
    }

    fn last_error(&self) -> String {
        // SAFETY: the handle is valid (owned by self); the returned C string is valid until the next tj3 call on
        // this thread, and we copy it out immediately.
        unsafe { error_string(self.raw()) }
    }

    fn failure(&self) -> TjFailure {
        // SAFETY: valid handle; tj3GetErrorCode only reads the instance's warning flag.
        let code = unsafe { tj::tj3GetErrorCode(self.raw()) };
        let msg = self.last_error();
        if code == tj::TJERR_TJERR_WARNING as libc::c_int { TjFailure::Warning(msg) } else { TjFailure::Fatal(msg) }
    }

    /// Set an integer parameter; only called with parameters valid for decompression instances.
    pub fn set(&mut self, param: tj::TJPARAM, value: i32) -> Result<(), ImageError> {
        self.ensure_usable().map_err(|m| ImageError::new(ImageErrorKind::Corrupt, m))?;
        // SAFETY: valid handle; tj3Set validates `param`/`value` and returns -1 on error, which we check.
        let rc = unsafe { tj::tj3Set(self.raw(), param as libc::c_int, value) };
        if rc != 0 {
            return Err(ImageError::new(
                ImageErrorKind::Unsupported,
                format!("tj3Set({param}): {}", self.last_error()),
            ));
        }
        match self.params.iter_mut().find(|(p, _)| *p == param) {
            Some(slot) => slot.1 = value,
            None => self.params.push((param, value)),
        }
        Ok(())
    }

    fn get(&self, param: tj::TJPARAM) -> i32 {
        // SAFETY: valid handle; tj3Get returns -1 for unknown parameters and never fails otherwise.
        unsafe { tj::tj3Get(self.raw(), param as libc::c_int) }
    }

    /// `tj3DecompressHeader` + the header parameters. Header warnings (e.g. junk bytes between markers) are
    /// accepted here: the decode call that follows re-parses the header and applies the warning policy.
    ///
    /// Any non-zero return re-creates the handle and parses once more on the fresh one: libjpeg-turbo reports
    /// "warning" whenever a warning was emitted during the call, *even if a fatal error followed it* (the error
    /// longjmps past `jpeg_abort_decompress` and past storing the header values, so a handle that decoded an
    /// image before would still report that image's size). On a fresh handle the size starts at -1, so a
    /// warning-then-fatal parse shows up as invalid dimensions, and a genuine warning (the parse ran to
    /// `jpeg_abort_decompress`) leaves a clean instance with this image's values.
    pub fn read_header(&mut self, bytes: &[u8]) -> Result<RawHeader, TjFailure> {
        self.ensure_usable().map_err(TjFailure::Fatal)?;
        if self.header_call(bytes) != 0 {
            self.recover();
            self.ensure_usable().map_err(TjFailure::Fatal)?;
            if self.header_call(bytes) != 0
                && let fatal @ TjFailure::Fatal(_) = self.failure()
            {
                self.recover();
                return Err(fatal);
            }
        }
        let h = RawHeader {
            width: self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH),
            height: self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT),
            subsamp: self.get(tj::TJPARAM_TJPARAM_SUBSAMP),
            colorspace: self.get(tj::TJPARAM_TJPARAM_COLORSPACE),
            precision: self.get(tj::TJPARAM_TJPARAM_PRECISION),
            lossless: self.get(tj::TJPARAM_TJPARAM_LOSSLESS) == 1,
            progressive: self.get(tj::TJPARAM_TJPARAM_PROGRESSIVE) == 1,
        };
        if h.width < 1 || h.height < 1 {
            // Either a warning-then-fatal parse (see above) or libjpeg-turbo returned no size: the instance may be
            // mid-parse, so it is replaced.
            let msg = match self.failure() {
                TjFailure::Warning(m) | TjFailure::Fatal(m) if m != "No error" => format!(" ({m})"),
                _ => String::new(),
            };
            self.recover();
            return Err(TjFailure::Fatal(format!("invalid JPEG dimensions {}x{}{msg}", h.width, h.height)));
        }
        Ok(h)
    }

    /// One `tj3DecompressHeader` call; its return code.
    fn header_call(&mut self, bytes: &[u8]) -> libc::c_int {
        // SAFETY: valid handle; `bytes` is a live slice of `bytes.len()` bytes that libjpeg-turbo only reads, and
        // it does not keep the pointer after returning (the source manager is reset by the next call).
        unsafe { tj::tj3DecompressHeader(self.raw(), bytes.as_ptr(), bytes.len() as tj::size_t) }
    }

    /// `tj3SetScalingFactor(num/denom)` (reduced fraction, as libjpeg-turbo's table lists them).
    pub fn set_scaling(&mut self, num: i32, denom: i32) -> Result<(), ImageError> {
        let sf = tj::tjscalingfactor { num, denom };
        // SAFETY: valid handle; the factor is passed by value and validated by libjpeg-turbo.
        let rc = unsafe { tj::tj3SetScalingFactor(self.raw(), sf) };
        if rc != 0 {
            let e = ImageError::new(ImageErrorKind::Unsupported, format!("tj3SetScalingFactor: {}", self.last_error()));
            self.recover();
            return Err(e);
        }
        Ok(())
    }

    /// `tj3SetCroppingRegion`; `None` = uncropped. Must follow `read_header` of the image about to be decoded.
    pub fn set_region(&mut self, region: Option<TjRegion>) -> Result<(), ImageError> {
        let r = region.unwrap_or(TjRegion { x: 0, y: 0, w: 0, h: 0 });
        let raw = tj::tjregion { x: r.x, y: r.y, w: r.w, h: r.h };
        // SAFETY: valid handle; the region is passed by value and validated against the header read last.
        let rc = unsafe { tj::tj3SetCroppingRegion(self.raw(), raw) };
        if rc != 0 {
            let e =
                ImageError::new(ImageErrorKind::Corrupt, format!("tj3SetCroppingRegion{r:?}: {}", self.last_error()));
            self.recover();
            return Err(e);
        }
        Ok(())
    }

    /// `tj3Decompress8` of the current scaling/cropping into `dst` (rows of `pitch` bytes).
    ///
    /// The caller guarantees `dst.len() >= pitch * rows` where `rows` is the cropping region's height (or the scaled
    /// image height when uncropped) and `pitch >= width * bytes_per_pixel(pixel_format)`; this is asserted for the
    /// row count it passes as `rows`.
    pub fn decompress8(
        &mut self,
        bytes: &[u8],
        dst: &mut [u8],
        pitch: usize,
        rows: usize,
        pixel_format: tj::TJPF,
    ) -> Result<(), TjFailure> {
        self.decompress_with(tj::tj3Decompress8, bytes, dst, pitch, rows, pixel_format)
    }

    /// `tj3Decompress12`: like `decompress8` for 12-bit JPEGs; `pitch` in samples (i16), not bytes.
    pub fn decompress12(
        &mut self,
        bytes: &[u8],
        dst: &mut [i16],
        pitch: usize,
        rows: usize,
        pixel_format: tj::TJPF,
    ) -> Result<(), TjFailure> {
        self.decompress_with(tj::tj3Decompress12, bytes, dst, pitch, rows, pixel_format)
    }

    /// The shared body of `decompress8`/`decompress12`: `call` is the tj3 entry point for samples of type `T`
    /// (`pitch` and `dst` counted in samples).
    fn decompress_with<T>(
        &mut self,
        call: unsafe extern "C" fn(
            tj::tjhandle,
            *const u8,
            tj::size_t,
            *mut T,
            libc::c_int,
            libc::c_int,
        ) -> libc::c_int,
        bytes: &[u8],
        dst: &mut [T],
        pitch: usize,
        rows: usize,
        pixel_format: tj::TJPF,
    ) -> Result<(), TjFailure> {
        assert!(pitch.checked_mul(rows).is_some_and(|n| n <= dst.len()), "decompress: destination too small");
        let pitch_c = i32::try_from(pitch).map_err(|_| TjFailure::Fatal("row pitch too large".into()))?;
        self.ensure_usable().map_err(TjFailure::Fatal)?;
        // SAFETY: valid handle; `bytes` is read-only input of the given length. libjpeg-turbo writes at most `rows`
        // rows of `pitch` samples into `dst`: the row count is the cropping region height we set (or the image height
        // from the same bytes' header when uncropped; the caller passes that as `rows`), each row at most
        // `output_width * 3|4 <= pitch` samples (checked by libjpeg-turbo against the region we set). The assert
        // above makes `dst` at least `pitch * rows` samples long; `call` takes samples of type `T`.
        let rc = unsafe {
            call(
                self.raw(),
                bytes.as_ptr(),
                bytes.len() as tj::size_t,
                dst.as_mut_ptr(),
                pitch_c,
                pixel_format as libc::c_int,
            )
        };
        if rc != 0 {
            // Warnings included: the cost of a fresh handle is negligible next to a damaged image, and it makes
            // "no state survives a failure" true without reasoning about which libjpeg paths clean up.
            let f = self.failure();
            self.recover();
            Err(f)
        } else {
            Ok(())
        }
    }
}

impl Drop for TjDecompressor {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init, is owned exclusively by self and is destroyed exactly once here.
        unsafe { tj::tj3Destroy(self.raw()) }
    }
}

/// `tj3Init(TJINIT_DECOMPRESS)`, or libjpeg-turbo's message when it fails.
fn init_handle() -> Result<NonNull<std::ffi::c_void>, String> {
    // SAFETY: tj3Init has no preconditions; it returns NULL on failure, which we check.
    let raw = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as libc::c_int) };
    match NonNull::new(raw) {
        Some(handle) => Ok(handle),
        // SAFETY: with a NULL handle, tj3GetErrorStr returns the global (thread-local) error string.
        None => Err(unsafe { error_string(std::ptr::null_mut()) }),
    }
}

/// Copy libjpeg-turbo's error string for `handle` (NULL = the global/thread-local one).
///
/// # Safety
/// `handle` must be NULL or a live tj3 handle.
unsafe fn error_string(handle: tj::tjhandle) -> String {
    // SAFETY: per this function's contract; tj3GetErrorStr never returns NULL (it returns a static buffer).
    let p = unsafe { tj::tj3GetErrorStr(handle) };
    if p.is_null() {
        return "unknown libjpeg-turbo error".into();
    }
    // SAFETY: p points to a NUL-terminated buffer of at most JMSG_LENGTH_MAX bytes owned by libjpeg-turbo.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_string_lossy().trim_end().replace('\n', " ")
}
