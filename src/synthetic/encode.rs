//! synthetic/encode — JPEG *encoding* with libjpeg-turbo (`tj3Compress8`): the other direction from `decode/`.
//! It writes the synthetic dataset (`synthetic/mod.rs`), and tests and fuzz seeds use it to make JPEGs of
//! known content (baseline, progressive, lossless, gray). Not on the training hot path.

// The encoder wraps libjpeg-turbo's C API; every unsafe block below carries a SAFETY note.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::fmt;
use std::io;

use turbojpeg_sys as tj;

use crate::decode::Subsampling;

/// libjpeg-turbo's `TJSAMP_*` for `s` (the one subsampling enum is decode/'s); `None` for `Unknown`.
fn tjsamp(s: Subsampling) -> Option<libc::c_int> {
    Some(match s {
        Subsampling::S444 => tj::TJSAMP_TJSAMP_444,
        Subsampling::S422 => tj::TJSAMP_TJSAMP_422,
        Subsampling::S420 => tj::TJSAMP_TJSAMP_420,
        Subsampling::Gray => tj::TJSAMP_TJSAMP_GRAY,
        Subsampling::S440 => tj::TJSAMP_TJSAMP_440,
        Subsampling::S411 => tj::TJSAMP_TJSAMP_411,
        Subsampling::S441 => tj::TJSAMP_TJSAMP_441,
        Subsampling::Unknown => return None,
    } as libc::c_int)
}

/// Bytes per input pixel [`JpegEncoder::encode`] expects for `subsampling` (1 for gray, else 3 for RGB).
pub fn input_channels(subsampling: Subsampling) -> usize {
    if subsampling == Subsampling::Gray { 1 } else { 3 }
}

/// An encoder failure: libjpeg-turbo's message or an argument problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError(pub String);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JPEG encode failed: {}", self.0)
    }
}

impl std::error::Error for EncodeError {}

impl From<EncodeError> for io::Error {
    fn from(e: EncodeError) -> Self {
        io::Error::other(e)
    }
}

/// One libjpeg-turbo compressor instance. Not `Send`: create one per thread (cheap, ~µs).
pub struct JpegEncoder {
    /// Owned `tjhandle` from `tj3Init(TJINIT_COMPRESS)`; non-null for the whole lifetime, destroyed in Drop.
    handle: tj::tjhandle,
}

impl JpegEncoder {
    /// Create a compressor.
    pub fn new() -> Result<Self, EncodeError> {
        // SAFETY: tj3Init has no preconditions; it returns NULL on failure, which we check.
        let handle = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_COMPRESS as libc::c_int) };
        if handle.is_null() {
            // SAFETY: tj3GetErrorStr(NULL) returns a pointer to a static, NUL-terminated thread-local buffer.
            let msg = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(std::ptr::null_mut())) };
            return Err(EncodeError(format!("tj3Init: {}", msg.to_string_lossy())));
        }
        Ok(Self { handle })
    }

    /// Write progressive JPEGs from now on (libjpeg's standard scan script: 10 scans for colour, 6 for gray);
    /// `false` goes back to baseline.
    pub fn set_progressive(&mut self, progressive: bool) -> Result<(), EncodeError> {
        self.set(tj::TJPARAM_TJPARAM_PROGRESSIVE, i32::from(progressive), "PROGRESSIVE")
    }

    /// Write a restart marker every `blocks` MCUs from now on (a DRI segment; 0 = none, the default).
    pub fn set_restart_blocks(&mut self, blocks: u16) -> Result<(), EncodeError> {
        self.set(tj::TJPARAM_TJPARAM_RESTARTBLOCKS, libc::c_int::from(blocks), "RESTARTBLOCKS")
    }

    /// Write arithmetic-coded JPEGs (SOF9, or SOF10 when progressive) from now on; `false` goes back to Huffman.
    pub fn set_arithmetic(&mut self, arithmetic: bool) -> Result<(), EncodeError> {
        self.set(tj::TJPARAM_TJPARAM_ARITHMETIC, i32::from(arithmetic), "ARITHMETIC")
    }

    /// libjpeg-turbo's last error message for this handle.
    fn last_error(&self) -> String {
        // SAFETY: `self.handle` is a live handle; the returned pointer is a NUL-terminated buffer owned by it,
        // copied out before any other call on the handle.
        unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.handle)) }.to_string_lossy().into_owned()
    }

    fn set(&mut self, param: tj::TJPARAM, value: libc::c_int, name: &str) -> Result<(), EncodeError> {
        // SAFETY: live handle; tj3Set validates `param`/`value` and reports failure through its return code.
        let rc = unsafe { tj::tj3Set(self.handle, param as libc::c_int, value) };
        if rc != 0 {
            return Err(EncodeError(format!("tj3Set({name}={value}): {}", self.last_error())));
        }
        Ok(())
    }

    /// Encode packed pixels (`RGB` rows of `width*3` bytes, or gray rows of `width` bytes when `subsampling`
    /// is [`Subsampling::Gray`]) at `quality` (1..=100) into a baseline JFIF byte vector.
    pub fn encode(
        &mut self,
        pixels: &[u8],
        width: u32,
        height: u32,
        quality: u8,
        subsampling: Subsampling,
    ) -> Result<Vec<u8>, EncodeError> {
        self.encode_with(pixels, width, height, quality, subsampling, None)
    }

    /// Encode packed pixels as a *lossless* JPEG (SOF3, predictor `psv` in 1..=7, no point transform). Lossless
    /// JPEG has no chroma subsampling: `subsampling` must be [`Subsampling::S444`] or
    /// [`Subsampling::Gray`]. Used by tests and fuzz seeds (Pillow cannot write lossless JPEGs).
    pub fn encode_lossless(
        &mut self,
        pixels: &[u8],
        width: u32,
        height: u32,
        subsampling: Subsampling,
        psv: u8,
    ) -> Result<Vec<u8>, EncodeError> {
        if !matches!(subsampling, Subsampling::S444 | Subsampling::Gray) || !(1..=7).contains(&psv) {
            return Err(EncodeError(format!(
                "lossless JPEG needs 4:4:4 or gray and psv 1..=7 ({subsampling:?}, {psv})"
            )));
        }
        self.encode_with(pixels, width, height, 100, subsampling, Some(psv))
    }

    fn encode_with(
        &mut self,
        pixels: &[u8],
        width: u32,
        height: u32,
        quality: u8,
        subsampling: Subsampling,
        lossless_psv: Option<u8>,
    ) -> Result<Vec<u8>, EncodeError> {
        let channels = input_channels(subsampling);
        let Some(samp) = tjsamp(subsampling) else {
            return Err(EncodeError(format!("cannot encode subsampling {subsampling:?}")));
        };
        let expected = (width as usize).checked_mul(height as usize).and_then(|n| n.checked_mul(channels));
        if width == 0 || height == 0 || width > i32::MAX as u32 / 4 || height > i32::MAX as u32 {
            return Err(EncodeError(format!("bad size {width}x{height}")));
        }
        if expected != Some(pixels.len()) {
            return Err(EncodeError(format!(
                "pixel buffer has {} bytes, {width}x{height}x{channels} needs {expected:?}",
                pixels.len()
            )));
        }
        if !(1..=100).contains(&quality) {
            return Err(EncodeError(format!("quality {quality} not in 1..=100")));
        }
        self.set(tj::TJPARAM_TJPARAM_QUALITY, quality as libc::c_int, "QUALITY")?;
        self.set(tj::TJPARAM_TJPARAM_SUBSAMP, samp, "SUBSAMP")?;
        // The output buffer is Rust-owned; NOREALLOC forbids libjpeg-turbo to free/realloc it (it would use
        // its own allocator on memory it does not own), so it must be the worst-case size up front.
        self.set(tj::TJPARAM_TJPARAM_NOREALLOC, 1, "NOREALLOC")?;
        // Parameters persist on the handle: set LOSSLESS explicitly on every call.
        self.set(tj::TJPARAM_TJPARAM_LOSSLESS, i32::from(lossless_psv.is_some()), "LOSSLESS")?;
        if let Some(psv) = lossless_psv {
            self.set(tj::TJPARAM_TJPARAM_LOSSLESSPSV, i32::from(psv), "LOSSLESSPSV")?;
            self.set(tj::TJPARAM_TJPARAM_LOSSLESSPT, 0, "LOSSLESSPT")?;
        }

        let (w, h) = (width as libc::c_int, height as libc::c_int);
        // SAFETY: pure function of its integer arguments; returns 0 when they are out of range.
        let worst_bytes = unsafe { tj::tj3JPEGBufSize(w, h, samp) } as usize;
        if worst_bytes == 0 {
            return Err(EncodeError(format!("tj3JPEGBufSize({width}x{height}): {}", self.last_error())));
        }
        // tj3JPEGBufSize is a bound for lossy JPEG; a lossless sample can take up to 16 + 9 bits, so give lossless
        // 4 bytes per sample (NOREALLOC makes libjpeg-turbo fail rather than overrun if that were still short).
        let worst_bytes = if lossless_psv.is_some() {
            worst_bytes.max(width as usize * height as usize * channels * 4 + 4096)
        } else {
            worst_bytes
        };
        let mut out = vec![0u8; worst_bytes];
        let mut out_ptr: *mut libc::c_uchar = out.as_mut_ptr();
        let mut out_bytes: tj::size_t = worst_bytes as tj::size_t;
        let pixel_format = if subsampling == Subsampling::Gray { tj::TJPF_TJPF_GRAY } else { tj::TJPF_TJPF_RGB };
        // SAFETY: `pixels` holds exactly width*height*channels bytes (checked above) and pitch 0 means
        // width*channels; `out` is a live allocation of `worst_bytes` (tj3JPEGBufSize's bound for this size
        // and subsampling, no ICC profile set) and NOREALLOC=1 guarantees libjpeg-turbo writes within it and
        // never reallocates or frees it; `out_bytes` is a valid size_t it overwrites with the JPEG length.
        let rc = unsafe {
            tj::tj3Compress8(
                self.handle,
                pixels.as_ptr(),
                w,
                0,
                h,
                pixel_format as libc::c_int,
                &mut out_ptr,
                &mut out_bytes,
            )
        };
        if rc != 0 {
            return Err(EncodeError(format!("tj3Compress8({width}x{height} q{quality}): {}", self.last_error())));
        }
        debug_assert_eq!(out_ptr, out.as_mut_ptr(), "NOREALLOC must keep our buffer");
        out.truncate(out_bytes as usize);
        Ok(out)
    }
}

impl Drop for JpegEncoder {
    fn drop(&mut self) {
        // SAFETY: `handle` came from tj3Init, is non-null and is destroyed exactly once here.
        unsafe { tj::tj3Destroy(self.handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoder_rejects_bad_arguments() {
        let mut e = JpegEncoder::new().unwrap();
        assert!(e.encode(&[0; 10], 4, 4, 90, Subsampling::S420).is_err());
        assert!(e.encode(&[0; 48], 4, 4, 0, Subsampling::S420).is_err());
        assert!(e.encode(&[0; 16], 4, 4, 90, Subsampling::Gray).is_ok());
    }
}
