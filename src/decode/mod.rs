//! decode — the stage between the worker (which owns the file bytes) and augment (which resamples them).
//!
//! Protocol of one sample (see docs/design/protocols.md "Decode"):
//! 1. **Sniff + header.** The format comes from magic bytes, never the extension (ImageNet has PNGs named
//!    `.JPEG`): `FF D8 FF` → JPEG (libjpeg-turbo, tj3 API), `89 P N G` → PNG (`png` crate), `RIFF…WEBP`, `GIF8`,
//!    `II*`/`MM*`, `BM`, `P1`–`P6` → WebP, GIF, TIFF, BMP, Netpbm (`other.rs`, decoded whole like PNG), 0 bytes →
//!    `Empty`, anything else → `UnknownFormat`. The header gives size, subsampling, colorspace and precision; the pixel
//!    limit ([`DecodeLimits::max_pixels`], default 100 MP) is checked here, before any pixel memory is touched →
//!    `TooLarge`. Before decoding a JPEG, [`markers::walk_jpeg`] checks its marker structure from the bytes alone:
//!    no EOI → `Corrupt` ("image file is truncated"), more scans than [`DecodeLimits::max_scans`] → `TooLarge`.
//! 2. **Scale.** augment maps its crop into original-image coordinates and picks the DCT scale M/8 with
//!    [`choose_scale_eighths`]: the smallest M whose scaled crop stays at least `min_ratio` × the output size in
//!    both dimensions, among the scales libjpeg-turbo has SIMD code for (M ∈ {1, 2, 4, 8}; the other M/8 are
//!    slower than no scaling at all, see [`FAST_SCALES_EIGHTHS`]). Original coordinate x maps to scaled x·M/8.
//!    [`Decoder::decode_window`] itself accepts any M in 1..=8.
//! 3. **Region.** The window augment needs (crop + resampling margin, in scaled pixels) is widened: left edge down
//!    to a multiple of the scaled iMCU width (`tj3SetCroppingRegion` requires it), and by [`ROI_GUARD_PX`] on every
//!    side that is not an image edge, so the pixels of the requested window are bit-identical to the same window
//!    of a full decode at that scale (libjpeg-turbo's fancy chroma upsampling replicates the edge of a cropped
//!    region instead of reading its neighbour; the guard keeps that difference outside the window).
//! 4. **Decode** into per-worker scratch as packed RGB8 and report where the region sits ([`DecodedRegion`]).
//!
//! Colour handling (matches Pillow's `Image.open(f).convert('RGB')`):
//! - gray JPEGs decode straight to RGB (libjpeg-turbo replicates the gray channel);
//! - CMYK/YCCK JPEGs decode to CMYK and are converted like Pillow: the samples are taken as Adobe-inverted (Pillow
//!   always assumes Adobe conventions for JPEG CMYK), then `R = (255-K) - (255-K)·C/255` in Pillow's integer form;
//! - 12-bit JPEGs (which Pillow cannot open) decode with `tj3Decompress12` and are rounded to 8 bits
//!   (`(v·255 + 2047) / 4095`); every other precision (lossless 2–16 bit other than 8) → `Unsupported`;
//! - lossless JPEGs have no DCT, hence no scaling and no cropping: they are decoded whole at M = 8. 8-bit lossless
//!   gray (which Pillow decodes) is decoded as gray and replicated, because libjpeg-turbo has no gray → RGB
//!   conversion for lossless data;
//! - PNG: see `pngdec.rs` (16-bit gray is clipped to 255, other 16-bit modes keep the high byte, as Pillow);
//! - WebP, GIF, TIFF, BMP, Netpbm: see `other.rs` (same rules; lossy WebP measured bit-exact with libwebp).
//!
//! Damage policy — one rule per kind of damage, decided independently of the random crop (libjpeg-turbo stops
//! reading once the cropping region is decoded, so anything decided by the decode itself would fail in some epochs
//! and not in others):
//! - **Truncated** (the data ends before its EOI marker) → `Corrupt` for every crop and scale, decided from the bytes
//!   by the marker walk (`markers.rs`, ~1% of a decode, `marker_walk_cost`) — Pillow's default "image file is
//!   truncated" error.
//! - **Damaged entropy data inside a complete file** (bad Huffman/arithmetic code, premature end of a data segment,
//!   lost restart markers, inconsistent progression): libjpeg-turbo finishes with a *warning* and fills the damaged
//!   part in; the image is accepted, as Pillow accepts it, and counted: [`Decoder::last_decode_damaged`] feeds the
//!   loader's `decode_warnings` statistic. (Whether a given crop touches the damaged part varies, so the count may;
//!   the outcome never does.) Warnings about metadata only (extraneous bytes before a marker, unknown Adobe
//!   transform, unknown JFIF revision, bad ICC marker) are accepted without counting.
//! - Fatal libjpeg-turbo errors (unreadable headers or scan headers, unsupported variants, budgets) → typed errors.
//!
//! **Fresh tables.** libjpeg keeps the quantization (DQT) and Huffman (DHT) tables of every image a handle parsed
//! ("abbreviated datastreams"), and one handle serves a worker's whole stream of images. An image that uses a
//! table it does not define would therefore decode with the last image's table — a file without DQT "decoded"
//! after another image, a file without DHT decoded with the previous image's optimized codes — so its pixels
//! would depend on what the worker decoded before. The marker walk of step 1 also records whether every scan
//! finds its tables defined earlier in the same file ([`markers::JpegStructure::borrows_tables`]); if not, the
//! handle is replaced by a fresh one before the decode (`jpeg.rs`, [`Decoder::table_renewals`] counts them),
//! which behaves as Pillow's one-decompressor-per-image: no DQT → `Corrupt` ("Quantization table 0x00 was not
//! defined"), no DHT in a sequential file → libjpeg's standard tables, no DHT in a progressive or lossless file
//! → `Corrupt`. A tables-only datastream (EOI, or the end of the data, before the first scan) is `Corrupt` at the
//! header, whatever the handle read before (tj3DecompressHeader would report the previous image's size for it). Files with their own
//! tables — nearly all — cost nothing extra: the walk runs anyway.
//!
//! Failures never outlive their image: after any failed libjpeg-turbo call the tj3 handle is re-created with the
//! same parameters (`jpeg.rs`, "Failure recovery"), and the PNG path builds a fresh `png::Decoder` per image.
//!
//! Budgets ([`DecodeLimits`], [`Decoder::with_limits`] / [`Decoder::set_limits`]): pixels (header), scans (marker
//! walk, plus libjpeg-turbo's `TJPARAM_SCANLIMIT`), memory (`TJPARAM_MAXMEMORY` for JPEG; for the formats decoded
//! whole, the decode's whole peak estimated from the header before any pixel memory: `png_peak_bytes` here,
//! `other.rs` for the rest) → `TooLarge` naming the budget. Scratch buffers grow to the largest region seen and are
//! reused (no allocation per image in steady state), but a buffer above `max_retained_scratch_bytes` that one
//! outlier inflated is released before the next image.
//!
//! EXIF orientation is NOT applied by default: pixels come out in stored order, exactly as torchvision's / PIL's
//! `ImageFolder` loading (`Image.open(f).convert('RGB')`, no `ImageOps.exif_transpose`) gives them. With
//! [`DecodeLimits::exif_transpose`] (the loader's `exif_transpose=True`) the orientation is read from the bytes
//! (`exif.rs`, Pillow's rules), [`Decoder::read_header`] reports the *oriented* size and orientation, and
//! [`Decoder::decode_window`] takes its window in oriented coordinates: it maps the window to the stored image,
//! decodes only that region (ROI + DCT scaling as usual) and transposes the decoded region into oriented order
//! in one pass (`Orientation::transpose_region`), exactly Pillow's `ImageOps.exif_transpose` at full scale.
//!
//! Beside the CPU decode, [`gpu_eligible()`] (`gpu_eligible.rs`) decides from a JPEG's header alone (~0.2 µs, no
//! entropy-data scan) whether nvJPEG's hardware engines may decode it, and if not, why (the GPU decode router, docs/design/gpu-decode.md).

#![allow(unsafe_code)]

pub mod exif;
pub mod gpu_eligible;
#[cfg(test)]
mod gpu_eligible_tests;
#[cfg(test)]
mod hardening_tests;
mod jpeg;
pub mod markers;
mod other;
#[cfg(test)]
mod other_tests;
mod pngdec;
#[cfg(test)]
mod table_state_tests;
#[cfg(test)]
mod tests;

use turbojpeg_sys as tj;

use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::param::IntParam;
pub use exif::Orientation;
pub use gpu_eligible::{GPU_MAX_DIMENSION, GPU_SUBSAMPLINGS, GpuJpeg, Ineligible, gpu_eligible};
use jpeg::{TjDecompressor, TjFailure, TjRegion};

/// Default decompression-bomb guard: images above this many pixels fail with `TooLarge` before decoding.
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;

/// Default scan limit (SOS segments per JPEG). libjpeg's standard progressive script has 10 scans for colour and
/// 6 for gray; the most seen in the 1,000-image ImageNet sample and the edge-case files is 11 (measured with
/// [`markers::walk_jpeg`], see `scan_counts_of_real_files`). 100 leaves room for hand-made scan scripts while
/// bounding the time bomb: each scan of a progressive file re-walks the coefficient buffer, so 2,000 scans cost
/// 17–47 s per image; 100 cost at most 1/20 of that.
pub const DEFAULT_MAX_SCANS: u32 = 100;

/// Default budget for the decoder's intermediate memory (libjpeg-turbo's coefficient buffers for progressive,
/// multi-scan and arithmetic JPEGs, `TJPARAM_MAXMEMORY`; everything a PNG, WebP, GIF, TIFF, BMP or Netpbm decode
/// holds at its peak). A progressive JPEG keeps 2 bytes per coefficient: ~3 B/pixel for 4:2:0, ~6 B/pixel for
/// 4:4:4, so 256 MiB still decodes an 85 MP 4:2:0 or a 44 MP 4:4:4 progressive photo, and refuses the 1.7 MB
/// 100 MP bomb that wanted ~580 MB. The whole-image formats need 3 B/pixel of RGB output plus their decoded
/// image: 256 MiB decodes an 85 MP RGB TIFF, a 63 MP gray TIFF or GIF, a 42 MP RGB PNG, a ~45 MP lossy WebP,
/// a ~20 MP lossless WebP.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 256 << 20;

/// Default size above which a scratch buffer is released before the next image instead of being kept: 32 MiB is
/// a full-size RGB decode of ~11 MP, far above the steady state of ImageNet-like data with DCT scaling (≤ 2 MB),
/// so steady state still allocates nothing, but one 100 MP outlier does not pin 300 MB per worker until `close()`.
pub const DEFAULT_MAX_RETAINED_SCRATCH_BYTES: usize = 32 << 20;

/// Per-image budgets of a [`Decoder`] (decode bombs). Violations fail with `TooLarge` naming the budget, before
/// the memory is allocated wherever the size is known from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Width × height above this → `TooLarge` (checked on the header, before any pixel memory).
    pub max_pixels: u64,
    /// JPEG scans (SOS segments) above this → `TooLarge` naming "scans" (counted by the marker walk before
    /// decoding, and libjpeg-turbo's `TJPARAM_SCANLIMIT` as a second line for progressive files).
    pub max_scans: u32,
    /// Memory of one decode. JPEG: libjpeg-turbo's coefficient buffers (`TJPARAM_MAXMEMORY`, rounded up to
    /// whole MiB). PNG, WebP, GIF, TIFF, BMP, Netpbm (decoded whole): the decode's peak — the crate's decoded
    /// image, the RGB8 output and the crate's own buffers — estimated from the header before anything is
    /// allocated (`png_peak_bytes`, other.rs `*_peak_bytes`; measured against a counting allocator in
    /// `tests/decode_memory.rs`), and the crates' own limits set to it as well. Not counted: the file's bytes,
    /// which the worker holds while it decodes. Above → `TooLarge` naming `max_memory_bytes`.
    pub max_memory_bytes: u64,
    /// Scratch buffers larger than this are released before the next image (see
    /// [`DEFAULT_MAX_RETAINED_SCRATCH_BYTES`]); smaller ones are kept and reused.
    pub max_retained_scratch_bytes: usize,
    /// Not a budget but a decode option that travels with them to every worker's decoder: apply the EXIF
    /// orientation (the loader's `exif_transpose`; default false, as torchvision's loading). See the module docs.
    pub exif_transpose: bool,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_pixels: DEFAULT_MAX_PIXELS,
            max_scans: DEFAULT_MAX_SCANS,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_retained_scratch_bytes: DEFAULT_MAX_RETAINED_SCRATCH_BYTES,
            exif_transpose: false,
        }
    }
}

/// `max_pixels`: at least one pixel, any 64-bit count.
pub const MAX_PIXELS: IntParam = IntParam::new("max_pixels", 1, u64::MAX as i128);
/// `max_scans`: at least one scan.
pub const MAX_SCANS: IntParam = IntParam::new("max_scans", 1, u32::MAX as i128);
/// `max_memory_bytes`: at least one byte.
pub const MAX_MEMORY_BYTES: IntParam = IntParam::new("max_memory_bytes", 1, u64::MAX as i128);

impl DecodeLimits {
    /// Check the values against [`MAX_PIXELS`], [`MAX_SCANS`] and [`MAX_MEMORY_BYTES`]. Errors name the field
    /// (the Loader maps them to `ConfigError`).
    pub fn validate(&self) -> Result<()> {
        MAX_PIXELS.check::<u64>(i128::from(self.max_pixels))?;
        MAX_SCANS.check::<u32>(i128::from(self.max_scans))?;
        MAX_MEMORY_BYTES.check::<u64>(i128::from(self.max_memory_bytes))?;
        Ok(())
    }

    /// `TJPARAM_MAXMEMORY` value: whole MiB, rounded up, clamped to libjpeg-turbo's int range (never 0, which
    /// would mean "unlimited").
    fn tj_max_memory_mib(&self) -> i32 {
        i32::try_from(self.max_memory_bytes.div_ceil(1 << 20)).unwrap_or(i32::MAX).max(1)
    }
}

/// Extra scaled pixels decoded around a requested window on sides that are not image edges (see module docs).
pub const ROI_GUARD_PX: u32 = 2;

/// Container format, from magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// JFIF/EXIF/Adobe JPEG (any SOF libjpeg-turbo decodes, including arithmetic and MPO's first frame).
    Jpeg,
    /// PNG.
    Png,
    /// WebP, lossy or lossless (`other.rs`; animated: the first frame).
    WebP,
    /// GIF (`other.rs`; the first frame).
    Gif,
    /// TIFF (`other.rs`; the first page).
    Tiff,
    /// Windows BMP (`other.rs`).
    Bmp,
    /// Netpbm PBM/PGM/PPM (`other.rs`).
    Pnm,
}

/// Chroma subsampling of a JPEG, the crate's one such enum: the decoder reports it (TurboJPEG's `TJSAMP_*`; PNGs
/// and the other formats report `S444`, or `Gray` for gray images), the encoder writes it
/// (`synthetic::encode::JpegEncoder`), and GPU eligibility admits the five nvJPEG's hardware decodes
/// ([`GPU_SUBSAMPLINGS`]). Declared in `TJSAMP_*` order ([`Subsampling::index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subsampling {
    /// 4:4:4 (every component 1×1).
    S444,
    /// 4:2:2 (luma 2×1: chroma halved horizontally).
    S422,
    /// 4:2:0 (luma 2×2: chroma halved in both directions; most camera/web JPEGs).
    S420,
    /// Single component (luma only; the encoder's input is one byte per pixel).
    Gray,
    /// 4:4:0 (luma 1×2: chroma halved vertically).
    S440,
    /// 4:1:1 (luma 4×1: chroma quartered horizontally; GPU decoders refuse it).
    S411,
    /// 4:4:1 (luma 1×4: chroma quartered vertically).
    S441,
    /// Sampling factors TurboJPEG cannot name; such images are decoded without cropping (and cannot be encoded).
    Unknown,
}

impl Subsampling {
    fn from_tj(v: i32) -> Self {
        match v {
            0 => Self::S444,
            1 => Self::S422,
            2 => Self::S420,
            3 => Self::Gray,
            4 => Self::S440,
            5 => Self::S411,
            6 => Self::S441,
            _ => Self::Unknown,
        }
    }

    /// Position in declaration order (`TJSAMP_*` order; the five of [`GPU_SUBSAMPLINGS`] come first, so it also
    /// indexes per-subsampling counters of GPU-eligible files).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Stable short name (`"444"`, `"422"`, `"420"`, `"gray"`, `"440"`, `"411"`, `"441"`, `"unknown"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::S444 => "444",
            Self::S422 => "422",
            Self::S420 => "420",
            Self::Gray => "gray",
            Self::S440 => "440",
            Self::S411 => "411",
            Self::S441 => "441",
            Self::Unknown => "unknown",
        }
    }

    /// The luma component's sampling factors (horizontal, vertical) when the chroma components are 1×1;
    /// `None` when unknown.
    pub const fn luma_factors(self) -> Option<(u8, u8)> {
        match self {
            Self::Gray | Self::S444 => Some((1, 1)),
            Self::S422 => Some((2, 1)),
            Self::S420 => Some((2, 2)),
            Self::S440 => Some((1, 2)),
            Self::S411 => Some((4, 1)),
            Self::S441 => Some((1, 4)),
            Self::Unknown => None,
        }
    }

    /// Unscaled iMCU width in pixels (`tjMCUWidth`); `None` when unknown.
    pub fn mcu_width(self) -> Option<u32> {
        match self {
            Self::S444 | Self::Gray | Self::S440 | Self::S441 => Some(8),
            Self::S422 | Self::S420 => Some(16),
            Self::S411 => Some(32),
            Self::Unknown => None,
        }
    }
}

impl std::fmt::Display for Subsampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Colorspace of the stored image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorSpace {
    /// RGB (JPEG without colour transform, or PNG colour).
    Rgb,
    /// YCbCr (the usual JPEG).
    YCbCr,
    /// Grayscale.
    Gray,
    /// CMYK (Adobe).
    Cmyk,
    /// YCCK (Adobe).
    Ycck,
}

/// What the header says about an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// Container format.
    pub format: ImageFormat,
    /// Width in pixels: of the stored image, or of the oriented one when the decoder applies EXIF orientation
    /// ([`DecodeLimits::exif_transpose`]; then [`ImageInfo::orientation`] says how they relate).
    pub width: u32,
    /// Height in pixels (stored or oriented, as `width`).
    pub height: u32,
    /// Chroma subsampling.
    pub subsampling: Subsampling,
    /// Stored colorspace.
    pub colorspace: ColorSpace,
    /// Bits per sample (8 or 12 decodable; PNG always reports 8).
    pub precision: u8,
    /// Lossless JPEG (SOF3): no DCT scaling, no cropping.
    pub lossless: bool,
    /// Progressive JPEG.
    pub progressive: bool,
    /// The EXIF orientation the decoder applies: `Normal` unless [`DecodeLimits::exif_transpose`] is on and the
    /// image has one (`width`/`height` are then the oriented size).
    pub orientation: Orientation,
}

impl ImageInfo {
    /// Whether DCT-domain scaling (M/8, M < 8) is available.
    pub fn can_scale(&self) -> bool {
        self.format == ImageFormat::Jpeg && !self.lossless
    }

    /// Whether a cropping region can be decoded (instead of the whole image).
    pub fn can_crop(&self) -> bool {
        self.can_scale() && self.subsampling != Subsampling::Unknown
    }

    /// Size of the whole image decoded at scale `scale_eighths`/8 (libjpeg-turbo's `TJSCALED`: rounded up).
    pub fn scaled_size(&self, scale_eighths: u8) -> (u32, u32) {
        let m = u64::from(self.effective_scale(scale_eighths));
        let s = |d: u32| ((u64::from(d) * m).div_ceil(8)) as u32;
        (s(self.width), s(self.height))
    }

    /// The scale actually used for a requested one: images that cannot scale decode at 8/8.
    pub fn effective_scale(&self, scale_eighths: u8) -> u8 {
        if self.can_scale() { scale_eighths.clamp(1, 8) } else { 8 }
    }

    /// The same header with the stored (un-oriented) size and orientation `Normal`.
    pub fn stored(&self) -> Self {
        let (width, height) = self.orientation.oriented_size(self.width, self.height);
        Self { width, height, orientation: Orientation::Normal, ..*self }
    }
}

/// A window `[x0, x1) × [y0, y1)` in pixels of the image scaled by M/8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelWindow {
    /// Left edge (inclusive).
    pub x0: u32,
    /// Top edge (inclusive).
    pub y0: u32,
    /// Right edge (exclusive).
    pub x1: u32,
    /// Bottom edge (exclusive).
    pub y1: u32,
}

/// Decoded pixels of a region of the (scaled) image, in the decoder's scratch memory.
#[derive(Debug)]
pub struct DecodedRegion<'a> {
    /// Packed RGB8 rows; row `r` starts at `r * stride`.
    pub pixels: &'a [u8],
    /// Bytes per row (≥ 3 · width).
    pub stride: usize,
    /// Scaled-image x of the first column.
    pub x0: u32,
    /// Scaled-image y of the first row.
    pub y0: u32,
    /// Columns decoded.
    pub width: u32,
    /// Rows decoded.
    pub height: u32,
    /// DCT scale actually used, in eighths (8 = full size).
    pub scale_eighths: u8,
    /// Size of the whole image at that scale.
    pub scaled_width: u32,
    /// Height of the whole image at that scale.
    pub scaled_height: u32,
}

impl DecodedRegion<'_> {
    /// Row `y` (0-based within the region) as packed RGB.
    pub fn row(&self, y: u32) -> &[u8] {
        let start = y as usize * self.stride;
        &self.pixels[start..start + 3 * self.width as usize]
    }
}

/// DCT scales (in eighths) that [`choose_scale_eighths`] picks from. libjpeg-turbo has SIMD IDCTs only for 8/8,
/// 4/8, 2/8 and 1/8; the other M/8 use its plain-C scaled IDCTs and are *slower* than a full-size decode
/// (measured on the ImageNet sample, one core: M=8 876 img/s, M=6 666, M=7 522, M=4 1006), so they are skipped.
pub const FAST_SCALES_EIGHTHS: [u8; 4] = [1, 2, 4, 8];

/// The smallest DCT scale M/8 among [`FAST_SCALES_EIGHTHS`] at which a crop of `extent_w × extent_h` original
/// pixels stays at least `min_ratio ×` an `out_w × out_h` output in both dimensions; 8 (full size) if no smaller
/// scale qualifies, including when the output is larger than the crop (upsampling).
pub fn choose_scale_eighths(extent_w: f64, extent_h: f64, out_w: u32, out_h: u32, min_ratio: f64) -> u8 {
    // Relative slack so that an exact fit (e.g. 448 → 224 at M = 4) is not lost to rounding.
    const SLACK: f64 = 1e-9;
    for m in FAST_SCALES_EIGHTHS {
        let f = f64::from(m) / 8.0;
        if extent_w * f >= min_ratio * f64::from(out_w) * (1.0 - SLACK)
            && extent_h * f >= min_ratio * f64::from(out_h) * (1.0 - SLACK)
        {
            return m;
        }
    }
    8
}

/// Sniff the container format from magic bytes.
pub fn sniff_format(bytes: &[u8]) -> std::result::Result<ImageFormat, ImageError> {
    if bytes.is_empty() {
        return Err(ImageError::new(ImageErrorKind::Empty, "file is empty (0 bytes)"));
    }
    if bytes.len() >= 3 && bytes[..3] == [0xFF, 0xD8, 0xFF] {
        return Ok(ImageFormat::Jpeg);
    }
    if bytes.len() >= 8 && bytes[..8] == pngdec::PNG_MAGIC {
        return Ok(ImageFormat::Png);
    }
    if let Some(f) = other::sniff(bytes) {
        return Ok(f);
    }
    let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Err(ImageError::new(
        ImageErrorKind::UnknownFormat,
        format!("not a JPEG, PNG, WebP, GIF, TIFF, BMP or Netpbm image (first bytes: {})", head.join(" ")),
    ))
}

/// Warnings that concern metadata only: the pixels are complete and Pillow decodes such files normally.
const BENIGN_WARNINGS: [&str; 4] =
    ["extraneous bytes before marker", "Unknown Adobe color transform", "unknown JFIF revision", "bad ICC marker"];

fn jpeg_failure(f: TjFailure) -> ImageError {
    match f {
        // libjpeg-turbo's own budget checks (second line behind ours): scans, memory, pixels.
        TjFailure::Fatal(m) if m.contains("more than") && m.contains("scans") => {
            ImageError::new(ImageErrorKind::TooLarge, format!("JPEG: {m} (scan limit)"))
        }
        TjFailure::Fatal(m)
            if m.contains("Memory limit exceeded")
                || m.contains("Backing store not supported")
                || m.contains("Insufficient memory") =>
        {
            ImageError::new(
                ImageErrorKind::TooLarge,
                format!("JPEG: intermediate buffers exceed the decoder's memory budget ({m})"),
            )
        }
        TjFailure::Fatal(m) if m.contains("Image is too large") => {
            ImageError::new(ImageErrorKind::TooLarge, format!("JPEG: {m} (pixel limit)"))
        }
        TjFailure::Fatal(m) => ImageError::new(ImageErrorKind::Corrupt, format!("JPEG: {m}")),
        TjFailure::Warning(m) => ImageError::new(ImageErrorKind::Corrupt, format!("JPEG (damaged data): {m}")),
    }
}

/// Apply the warning policy to the outcome of a decode call.
/// Returns whether libjpeg-turbo reported damaged pixel data (a non-benign warning: the image is complete, the
/// damaged part filled in, exactly what Pillow returns for such a file).
fn check_decode(r: std::result::Result<(), TjFailure>) -> std::result::Result<bool, ImageError> {
    match r {
        Ok(()) => Ok(false),
        Err(TjFailure::Warning(m)) => Ok(!BENIGN_WARNINGS.iter().any(|b| m.contains(b))),
        Err(f) => Err(jpeg_failure(f)),
    }
}

/// Grow `v` to at least `n` elements (never shrinks here: steady state allocates nothing; outliers are released
/// by [`release_if_above`] before the next image).
fn ensure_len<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// Drop `v`'s memory if it holds more than `max_bytes` (an outlier inflated it).
fn release_if_above<T>(v: &mut Vec<T>, max_bytes: usize) {
    if v.capacity().saturating_mul(std::mem::size_of::<T>()) > max_bytes {
        *v = Vec::new();
    }
}

/// Per-worker decoder: one tj3 handle plus scratch buffers that grow to the largest region seen and are reused
/// (up to [`DecodeLimits::max_retained_scratch_bytes`]; larger ones are released before the next image).
/// Not shareable between threads (`!Sync`); movable to the thread that uses it.
pub struct Decoder {
    tj: TjDecompressor,
    limits: DecodeLimits,
    /// RGB8 output of the last decode (region or whole PNG).
    rgb: Vec<u8>,
    /// The oriented copy of the last decoded region (only with `exif_transpose`, for images that have an
    /// orientation).
    oriented: Vec<u8>,
    /// CMYK scratch (CMYK/YCCK JPEGs; gray samples of lossless gray JPEGs).
    cmyk: Vec<u8>,
    /// 12-bit scratch.
    wide: Vec<i16>,
    /// PNG decoder's (and the other formats' decoders') native output.
    png_raw: Vec<u8>,
    /// The last decode met damaged entropy data (see the warning policy in the module docs).
    damaged: bool,
    /// Zero the scratch a decode writes before decoding (only for the second decode of a damaged file).
    zero_scratch: bool,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder with its own tj3 handle and the default limits ([`DecodeLimits::default`]).
    pub fn new() -> Result<Self> {
        Self::with_limits(DecodeLimits::default())
    }

    /// A decoder with its own tj3 handle and the given limits (validated: `ConfigError` naming the field).
    pub fn with_limits(limits: DecodeLimits) -> Result<Self> {
        limits.validate()?;
        let tj = TjDecompressor::new().map_err(|m| TrdataError::Worker(format!("tj3Init failed: {m}")))?;
        let mut d = Self {
            tj,
            limits,
            rgb: Vec::new(),
            oriented: Vec::new(),
            cmyk: Vec::new(),
            wide: Vec::new(),
            png_raw: Vec::new(),
            damaged: false,
            zero_scratch: false,
        };
        // Don't extract ICC profiles (we ignore them, like torchvision's loading): saves copying APP2 segments.
        d.tj.set(tj::TJPARAM_TJPARAM_SAVEMARKERS, 0)
            .and_then(|()| d.apply_limits())
            .map_err(|e| TrdataError::Worker(format!("configuring libjpeg-turbo failed: {e}")))?;
        Ok(d)
    }

    /// Replace the limits (validated first; on error nothing changes).
    pub fn set_limits(&mut self, limits: DecodeLimits) -> Result<()> {
        limits.validate()?;
        self.limits = limits;
        self.apply_limits().map_err(|e| TrdataError::Worker(format!("configuring libjpeg-turbo failed: {e}")))
    }

    /// The limits in force.
    pub fn limits(&self) -> DecodeLimits {
        self.limits
    }

    /// Whether the last successful decode met damaged pixel data (libjpeg-turbo filled it in, as Pillow does).
    pub fn last_decode_damaged(&self) -> bool {
        self.damaged
    }

    /// Mirror the limits into libjpeg-turbo's own guards (a second line behind the checks done here). The
    /// handle remembers them across its re-creation after failures.
    fn apply_limits(&mut self) -> std::result::Result<(), ImageError> {
        // Its pixel limit is an int; 0 = unlimited.
        let tj_pixels = i32::try_from(self.limits.max_pixels).unwrap_or(0);
        self.tj.set(tj::TJPARAM_TJPARAM_MAXPIXELS, tj_pixels)?;
        self.tj.set(tj::TJPARAM_TJPARAM_SCANLIMIT, i32::try_from(self.limits.max_scans).unwrap_or(i32::MAX))?;
        self.tj.set(tj::TJPARAM_TJPARAM_MAXMEMORY, self.limits.tj_max_memory_mib())
    }

    /// How many times the tj3 handle was re-created after a failed call (see `jpeg.rs`, "Failure recovery").
    pub fn handle_resets(&self) -> u64 {
        self.tj.resets()
    }

    /// How many times the tj3 handle was renewed before decoding an image that uses a table it does not define
    /// (module docs, "Fresh tables").
    pub fn table_renewals(&self) -> u64 {
        self.tj.renewals()
    }

    /// Bytes of scratch memory currently held (capacity of all buffers).
    pub fn scratch_bytes(&self) -> usize {
        self.rgb.capacity()
            + self.oriented.capacity()
            + self.cmyk.capacity()
            + 2 * self.wide.capacity()
            + self.png_raw.capacity()
    }

    /// Release buffers an outlier inflated above `max_retained_scratch_bytes` (called before each decode, because
    /// the previous decode's pixels are borrowed by its caller until then).
    fn release_outlier_scratch(&mut self) {
        let max = self.limits.max_retained_scratch_bytes;
        release_if_above(&mut self.rgb, max);
        release_if_above(&mut self.oriented, max);
        release_if_above(&mut self.cmyk, max);
        release_if_above(&mut self.wide, max);
        release_if_above(&mut self.png_raw, max);
    }

    fn check_size(&self, w: u32, h: u32) -> std::result::Result<(), ImageError> {
        let px = u64::from(w) * u64::from(h);
        if px > self.limits.max_pixels {
            return Err(ImageError::new(
                ImageErrorKind::TooLarge,
                format!("{w}x{h} = {px} pixels exceeds the limit of {} pixels", self.limits.max_pixels),
            ));
        }
        Ok(())
    }

    /// The byte-level rules checked before libjpeg-turbo touches the pixels: a complete marker structure up to
    /// EOI (truncated → `Corrupt`, whatever the crop) and the scan limit (→ `TooLarge`).
    ///
    /// The same walk says whether the image uses a table it does not define (`borrows_tables`); then the tj3
    /// handle is renewed and the header re-read on it, so the decode sees the tables a fresh handle would (module
    /// docs, "Fresh tables"). Images with their own tables — nearly all — pay nothing beyond the walk.
    fn check_jpeg_structure(&mut self, bytes: &[u8]) -> std::result::Result<(), ImageError> {
        let st =
            markers::walk_jpeg(bytes).map_err(|e| ImageError::new(ImageErrorKind::Corrupt, format!("JPEG: {e}")))?;
        if st.scans > self.limits.max_scans {
            return Err(ImageError::new(
                ImageErrorKind::TooLarge,
                format!("JPEG has {} scans, above the limit of {} scans", st.scans, self.limits.max_scans),
            ));
        }
        if st.borrows_tables {
            self.tj.renew();
            // The cropping region is checked against the header the handle read last: read it on the new handle.
            self.tj.read_header(bytes).map_err(jpeg_failure)?;
        }
        Ok(())
    }

    /// Read the header (no pixel decoding) and apply the format and size checks. With
    /// [`DecodeLimits::exif_transpose`] the size is the oriented one and `orientation` says how it was found
    /// (see the module docs); otherwise the stored size, `orientation` `Normal`.
    pub fn read_header(&mut self, bytes: &[u8]) -> std::result::Result<ImageInfo, ImageError> {
        let info = self.read_stored_header(bytes)?;
        if !self.limits.exif_transpose {
            return Ok(info);
        }
        let orientation = exif::orientation(info.format, bytes);
        let (width, height) = orientation.oriented_size(info.width, info.height);
        Ok(ImageInfo { width, height, orientation, ..info })
    }

    /// [`read_header`](Self::read_header) without the orientation: the stored size.
    fn read_stored_header(&mut self, bytes: &[u8]) -> std::result::Result<ImageInfo, ImageError> {
        let info = match sniff_format(bytes)? {
            format @ (ImageFormat::Png
            | ImageFormat::WebP
            | ImageFormat::Gif
            | ImageFormat::Tiff
            | ImageFormat::Bmp
            | ImageFormat::Pnm) => {
                let (width, height) =
                    if format == ImageFormat::Png { pngdec::png_size(bytes)? } else { other::size(format, bytes)? };
                ImageInfo {
                    format,
                    width,
                    height,
                    subsampling: Subsampling::S444,
                    colorspace: ColorSpace::Rgb,
                    precision: 8,
                    lossless: true,
                    progressive: false,
                    orientation: Orientation::Normal,
                }
            }
            ImageFormat::Jpeg => {
                // A tables-only datastream (EOI before any SOS, or a header cut short) makes tj3DecompressHeader
                // load its tables and return success with the *previous* image's header values (-1 on a fresh
                // handle): refuse it from the bytes, the same way whatever the handle read before.
                if markers::ends_before_scan(bytes) {
                    return Err(ImageError::new(
                        ImageErrorKind::Corrupt,
                        "JPEG: no image (EOI or the end of the data before the first scan: a tables-only \
                         datastream or a truncated header)",
                    ));
                }
                let h = self.tj.read_header(bytes).map_err(jpeg_failure)?;
                let colorspace = match h.colorspace {
                    0 => ColorSpace::Rgb,
                    1 => ColorSpace::YCbCr,
                    2 => ColorSpace::Gray,
                    3 => ColorSpace::Cmyk,
                    4 => ColorSpace::Ycck,
                    other => {
                        return Err(ImageError::new(ImageErrorKind::Unsupported, format!("JPEG colorspace {other}")));
                    }
                };
                ImageInfo {
                    format: ImageFormat::Jpeg,
                    width: h.width as u32,
                    height: h.height as u32,
                    subsampling: Subsampling::from_tj(h.subsamp),
                    colorspace,
                    precision: u8::try_from(h.precision).unwrap_or(0),
                    lossless: h.lossless,
                    progressive: h.progressive,
                    orientation: Orientation::Normal,
                }
            }
        };
        self.check_size(info.width, info.height)?;
        if info.format == ImageFormat::Jpeg && info.precision != 8 && (info.precision != 12 || info.lossless) {
            return Err(ImageError::new(
                ImageErrorKind::Unsupported,
                format!(
                    "{}-bit {} JPEG (only 8-bit, and 12-bit lossy, are decoded)",
                    info.precision,
                    if info.lossless { "lossless" } else { "lossy" }
                ),
            ));
        }
        Ok(info)
    }

    /// Decode at least `window` (scaled-image pixels, clamped to the image) of the image scaled by
    /// `scale_eighths`/8 into scratch, as packed RGB8. The region returned may be larger than the window (iMCU
    /// alignment, guard pixels; PNG and lossless JPEG always decode whole) and reports the scale actually used.
    /// With [`DecodeLimits::exif_transpose`], `window` and the region are in oriented coordinates (of the size
    /// [`read_header`](Self::read_header) reports): the stored preimage of the window is decoded and transposed.
    pub fn decode_window(
        &mut self,
        bytes: &[u8],
        scale_eighths: u8,
        window: PixelWindow,
    ) -> std::result::Result<DecodedRegion<'_>, ImageError> {
        // The header is read again here, from these very bytes, so that the buffer sizes below and what
        // libjpeg-turbo writes come from the same parse (a caller-provided ImageInfo could be stale).
        self.release_outlier_scratch();
        self.damaged = false;
        let info = self.read_header(bytes)?;
        let o = info.orientation;
        let stored = info.stored();
        let m = stored.effective_scale(scale_eighths);
        let (sw, sh) = stored.scaled_size(m);
        let oriented = exif::Rect { x0: window.x0, y0: window.y0, x1: window.x1, y1: window.y1 };
        let s = o.stored_rect(oriented, sw, sh);
        let got = self.decode_stored(bytes, &stored, m, PixelWindow { x0: s.x0, y0: s.y0, x1: s.x1, y1: s.y1 })?;
        if o == Orientation::Normal {
            return Ok(self.region_view(got.x0, got.y0, got.x1 - got.x0, got.y1 - got.y0, m, sw, sh));
        }
        let out = o.transpose_region(&self.rgb, 3 * (got.x1 - got.x0) as usize, got, sw, sh, &mut self.oriented);
        let (osw, osh) = o.oriented_size(sw, sh);
        let (w, h) = (out.x1 - out.x0, out.y1 - out.y0);
        Ok(DecodedRegion {
            pixels: &self.oriented[..3 * w as usize * h as usize],
            stride: 3 * w as usize,
            x0: out.x0,
            y0: out.y0,
            width: w,
            height: h,
            scale_eighths: m,
            scaled_width: osw,
            scaled_height: osh,
        })
    }

    /// Decode (at least) the stored-image `window` of the image scaled by `m`/8 (`info`: its stored header; `m`
    /// already effective, `sw × sh` the scaled size) into `self.rgb`, rows packed (`3 · width` apart); returns
    /// the rectangle decoded. Formats without ROI decoding, and lossless JPEGs, decode whole.
    fn decode_stored(
        &mut self,
        bytes: &[u8],
        info: &ImageInfo,
        m: u8,
        window: PixelWindow,
    ) -> std::result::Result<exif::Rect, ImageError> {
        if info.format != ImageFormat::Jpeg {
            let (w, h) = self.decode_whole(info.format, bytes)?;
            return Ok(exif::Rect { x0: 0, y0: 0, x1: w, y1: h });
        }
        self.check_jpeg_structure(bytes)?;
        let (sw, sh) = info.scaled_size(m);
        let region = if info.can_crop() { Some(self.crop_region(info, m, sw, sh, window)) } else { None };
        let (x0, y0, w, h) = match region {
            Some(r) => (r.x as u32, r.y as u32, r.w as u32, r.h as u32),
            None => (0, 0, sw, sh),
        };
        let rect = self.decode_region(bytes, info, m, region, exif::Rect { x0, y0, x1: x0 + w, y1: y0 + h })?;
        if !self.damaged {
            return Ok(rect);
        }
        // Damaged data: libjpeg-turbo reports "warning" even when a fatal error followed the warning (tj3GetErrorCode
        // only looks at the warning flag), and then leaves rows unwritten, which would keep the previous image's
        // pixels in scratch. Decode once more into zeroed scratch on the fresh handle (every failed call renews
        // it), so the unwritten rows are zeros whatever the worker decoded before. Only damaged files pay this.
        self.damaged = false;
        self.tj.read_header(bytes).map_err(jpeg_failure)?;
        self.zero_scratch = true;
        let again = self.decode_region(bytes, info, m, region, exif::Rect { x0, y0, x1: x0 + w, y1: y0 + h });
        self.zero_scratch = false;
        again
    }

    /// Set scaling `m`/8 and `region` (its rectangle: `rect`) and decode into `self.rgb` (see `decode_stored`).
    fn decode_region(
        &mut self,
        bytes: &[u8],
        info: &ImageInfo,
        m: u8,
        region: Option<TjRegion>,
        rect: exif::Rect,
    ) -> std::result::Result<exif::Rect, ImageError> {
        let (w, h) = (rect.x1 - rect.x0, rect.y1 - rect.y0);
        let g = gcd(u32::from(m), 8) as i32;
        self.tj.set_scaling(i32::from(m) / g, 8 / g)?;
        self.tj.set_region(region)?;
        match self.decode_pixels(bytes, info, w as usize, h as usize) {
            Ok(()) => {}
            // libjpeg's own iMCU alignment can exceed TurboJPEG's table for unusual sampling factors (e.g. 4:4:4
            // stored as 2x2 in every component); TurboJPEG then refuses the left edge. Retry at full width.
            Err(e) if region.is_some_and(|r| r.x > 0) && e.message.contains("mismatch") => {
                let r = region.map(|r| TjRegion { x: 0, w: r.x + r.w, ..r });
                self.tj.set_region(r)?;
                let rr = r.unwrap_or(TjRegion { x: 0, y: 0, w: 0, h: 0 });
                self.decode_pixels(bytes, info, rr.w as usize, rr.h as usize)?;
                let (y0, w, h) = (rr.y as u32, rr.w as u32, rr.h as u32);
                return Ok(exif::Rect { x0: 0, y0, x1: w, y1: y0 + h });
            }
            Err(e) => return Err(e),
        }
        Ok(rect)
    }

    /// Decode a format without ROI or scaling (everything but JPEG) whole into `self.rgb`; the header has been
    /// read and checked.
    fn decode_whole(&mut self, format: ImageFormat, bytes: &[u8]) -> std::result::Result<(u32, u32), ImageError> {
        if format == ImageFormat::Png {
            let need = png_peak_bytes(bytes)?;
            if need > self.limits.max_memory_bytes {
                return Err(ImageError::new(
                    ImageErrorKind::TooLarge,
                    format!(
                        "PNG: decoding needs about {need} bytes of memory (decoded image, RGB output and decoder \
                         buffers), above the memory budget of {} bytes (max_memory_bytes)",
                        self.limits.max_memory_bytes
                    ),
                ));
            }
            pngdec::decode_png_rgb(bytes, &mut self.png_raw, &mut self.rgb, &self.limits)
        } else {
            other::decode_rgb(format, bytes, &mut self.png_raw, &mut self.rgb, &self.limits)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn region_view(&self, x0: u32, y0: u32, w: u32, h: u32, m: u8, sw: u32, sh: u32) -> DecodedRegion<'_> {
        let stride = 3 * w as usize;
        DecodedRegion {
            pixels: &self.rgb[..stride * h as usize],
            stride,
            x0,
            y0,
            width: w,
            height: h,
            scale_eighths: m,
            scaled_width: sw,
            scaled_height: sh,
        }
    }

    /// The cropping region for `window`: clamped, guarded, left edge aligned to the scaled iMCU width.
    fn crop_region(&self, info: &ImageInfo, m: u8, sw: u32, sh: u32, window: PixelWindow) -> TjRegion {
        let mcu = info.subsampling.mcu_width().unwrap_or(8);
        let align = (mcu * u32::from(m)).div_ceil(8).max(1);
        let wx0 = window.x0.min(sw - 1);
        let wy0 = window.y0.min(sh - 1);
        let wx1 = window.x1.clamp(wx0 + 1, sw);
        let wy1 = window.y1.clamp(wy0 + 1, sh);
        let x0 = wx0.saturating_sub(ROI_GUARD_PX) / align * align;
        let x1 = (wx1 + ROI_GUARD_PX).min(sw);
        let y0 = wy0.saturating_sub(ROI_GUARD_PX);
        let y1 = (wy1 + ROI_GUARD_PX).min(sh);
        TjRegion { x: x0 as i32, y: y0 as i32, w: (x1 - x0) as i32, h: (y1 - y0) as i32 }
    }

    /// Decode the current scaling/cropping (`w × h` output pixels) into `self.rgb` as packed RGB8.
    fn decode_pixels(
        &mut self,
        bytes: &[u8],
        info: &ImageInfo,
        w: usize,
        h: usize,
    ) -> std::result::Result<(), ImageError> {
        let cmyk = matches!(info.colorspace, ColorSpace::Cmyk | ColorSpace::Ycck);
        let (pf, bpp) = if cmyk { (tj::TJPF_TJPF_CMYK, 4) } else { (tj::TJPF_TJPF_RGB, 3) };
        if self.zero_scratch {
            // The re-decode of a damaged file (see `decode_stored`): rows libjpeg-turbo leaves unwritten are zeros.
            for v in [&mut self.rgb, &mut self.cmyk] {
                ensure_len(v, w * h * 4);
                v[..w * h * 4].fill(0);
            }
            ensure_len(&mut self.wide, w * h * bpp);
            self.wide[..w * h * bpp].fill(0);
        }
        ensure_len(&mut self.rgb, w * h * 3);
        if info.lossless && info.colorspace == ColorSpace::Gray {
            // libjpeg-turbo has no gray → RGB conversion for lossless JPEG ("Unsupported color conversion
            // request"): decode gray into the CMYK scratch and replicate, as Pillow's L → RGB does.
            ensure_len(&mut self.cmyk, w * h);
            self.damaged |= check_decode(self.tj.decompress8(bytes, &mut self.cmyk, w, h, tj::TJPF_TJPF_GRAY))?;
            for (d, &g) in self.rgb.chunks_exact_mut(3).zip(&self.cmyk[..w * h]) {
                d.fill(g);
            }
        } else if info.precision == 12 {
            ensure_len(&mut self.wide, w * h * bpp);
            self.damaged |= check_decode(self.tj.decompress12(bytes, &mut self.wide, w * bpp, h, pf))?;
            let wide = &self.wide[..w * h * bpp];
            if cmyk {
                ensure_len(&mut self.cmyk, w * h * 4);
                for (d, &s) in self.cmyk.iter_mut().zip(wide) {
                    *d = twelve_to_eight(s);
                }
                cmyk_to_rgb(&self.cmyk[..w * h * 4], &mut self.rgb[..w * h * 3]);
            } else {
                for (d, &s) in self.rgb.iter_mut().zip(wide) {
                    *d = twelve_to_eight(s);
                }
            }
        } else if cmyk {
            ensure_len(&mut self.cmyk, w * h * 4);
            self.damaged |= check_decode(self.tj.decompress8(bytes, &mut self.cmyk, w * 4, h, pf))?;
            cmyk_to_rgb(&self.cmyk[..w * h * 4], &mut self.rgb[..w * h * 3]);
        } else {
            self.damaged |= check_decode(self.tj.decompress8(bytes, &mut self.rgb, w * 3, h, pf))?;
        }
        Ok(())
    }

    /// Decode the whole image at full size into `out` (packed RGB8, resized as needed) — no ROI, no scaling.
    /// This is the "raw libjpeg-turbo decode" ceiling the benchmarks compare against.
    /// With [`DecodeLimits::exif_transpose`] the image comes out oriented (and the size returned is the oriented
    /// one).
    pub fn decode_full_rgb(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> std::result::Result<(u32, u32), ImageError> {
        let (w, h) = self.decode_full_stored(bytes, out)?;
        let o = if self.limits.exif_transpose {
            exif::orientation(sniff_format(bytes)?, bytes)
        } else {
            Orientation::Normal
        };
        if o == Orientation::Normal {
            return Ok((w, h));
        }
        let all = exif::Rect { x0: 0, y0: 0, x1: w, y1: h };
        o.transpose_region(out, 3 * w as usize, all, w, h, &mut self.oriented);
        let n = 3 * w as usize * h as usize;
        out.clear();
        out.extend_from_slice(&self.oriented[..n]);
        Ok(o.oriented_size(w, h))
    }

    /// [`decode_full_rgb`](Self::decode_full_rgb) in stored order.
    fn decode_full_stored(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> std::result::Result<(u32, u32), ImageError> {
        self.release_outlier_scratch();
        self.damaged = false;
        let info = self.read_stored_header(bytes)?;
        let (w, h) = (info.width, info.height);
        let n = 3 * w as usize * h as usize;
        if info.format != ImageFormat::Jpeg {
            self.decode_whole(info.format, bytes)?;
            out.clear();
            out.extend_from_slice(&self.rgb[..n]);
            return Ok((w, h));
        }
        self.check_jpeg_structure(bytes)?;
        self.tj.set_scaling(1, 1)?;
        // An explicit full region bounds the rows libjpeg-turbo writes to the size computed here.
        let region = info.can_crop().then_some(TjRegion { x: 0, y: 0, w: w as i32, h: h as i32 });
        for zero in [false, true] {
            if zero {
                // Damaged data: decode again into zeroed memory on the fresh handle (see `decode_stored`).
                self.damaged = false;
                self.tj.read_header(bytes).map_err(jpeg_failure)?;
                self.tj.set_scaling(1, 1)?;
            }
            self.tj.set_region(region)?;
            if info.precision == 8
                && !matches!(info.colorspace, ColorSpace::Cmyk | ColorSpace::Ycck)
                && !(info.lossless && info.colorspace == ColorSpace::Gray)
            {
                ensure_len(out, n);
                out.truncate(n);
                if zero {
                    out.fill(0);
                }
                self.damaged |=
                    check_decode(self.tj.decompress8(bytes, out, 3 * w as usize, h as usize, tj::TJPF_TJPF_RGB))?;
            } else {
                self.zero_scratch = zero;
                let r = self.decode_pixels(bytes, &info, w as usize, h as usize);
                self.zero_scratch = false;
                r?;
                out.clear();
                out.extend_from_slice(&self.rgb[..n]);
            }
            if !self.damaged {
                break;
            }
        }
        Ok((w, h))
    }
}

/// Peak memory of a PNG decode (`pngdec.rs` on the `png` crate 0.18), from the header, before anything is
/// allocated: the RGB8 output (3 bytes per pixel), the crate's output after `EXPAND` (palette → RGB, low-bit gray
/// → 8-bit, a `tRNS` chunk adds alpha, 16-bit samples kept), and the crate's own buffers: the inflate state and
/// the unfiltering buffer, which holds whole raw rows (it shifts back only once it has freed
/// max(128 KiB, 4 rows rounded up to a power of two)) — 512 KiB plus 16 raw rows bounds them
/// (`tests/decode_memory.rs` measures every colour type against this). A header claiming more image data than
/// the file's IDAT chunks can inflate to is `Corrupt` (as `pngdec.rs` decides), before the budget.
fn png_peak_bytes(bytes: &[u8]) -> std::result::Result<u64, ImageError> {
    let corrupt = |m: &str| ImageError::new(ImageErrorKind::Corrupt, format!("PNG: {m}"));
    let (w, h) = pngdec::png_size(bytes)?;
    let ihdr = bytes.get(24..29).ok_or_else(|| corrupt("IHDR chunk too short"))?;
    let (depth, color) = (u64::from(ihdr[0]), ihdr[1]);
    // Walk the chunk headers (lengths only): tRNS (before the first IDAT), and the IDAT bytes present.
    let (mut trns, mut idat_seen, mut idat) = (false, false, 0u64);
    let mut pos = 8usize;
    while let Some(head) = bytes.get(pos..pos + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        match &head[4..8] {
            b"tRNS" if !idat_seen => trns = true,
            b"IDAT" => {
                idat_seen = true;
                idat += len.min(bytes.len() - pos - 8) as u64;
            }
            b"IEND" => break,
            _ => {}
        }
        match pos.checked_add(12).and_then(|p| p.checked_add(len)) {
            Some(next) => pos = next,
            None => break,
        }
    }
    // Samples per pixel as stored, and after EXPAND (tRNS adds an alpha sample to gray, RGB and palette).
    let (stored, expanded) = match color {
        0 => (1, 1 + u64::from(trns)),
        2 => (3, 3 + u64::from(trns)),
        3 => (1, 3 + u64::from(trns)),
        4 => (2, 2),
        6 => (4, 4),
        other => return Err(corrupt(&format!("invalid colour type {other}"))),
    };
    let sample_bytes = if depth == 16 && color != 3 { 2 } else { 1 };
    let (w64, h64) = (u64::from(w), u64::from(h));
    let raw_row = (w64 * stored * depth).div_ceil(8) + 1;
    let output = w64 * h64 * expanded * sample_bytes;
    // A header whose image cannot be in the file is a lie or a truncation, whatever the budget (the rule of
    // `pngdec.rs`, which decides it first: deflate expands at most 1032:1; 1 KiB of slack for framing).
    let needed_compressed = raw_row * h64 / 1032;
    if idat + 1024 < needed_compressed {
        return Err(corrupt(&format!(
            "{w}x{h} needs at least {needed_compressed} bytes of image data, the file has {idat} (truncated or lying \
             header)"
        )));
    }
    Ok(3 * w64 * h64 + output + (512 << 10) + 16 * raw_row)
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// 12-bit sample → 8 bits, rounded.
#[inline]
fn twelve_to_eight(v: i16) -> u8 {
    let v = i32::from(v).clamp(0, 4095);
    ((v * 255 + 2047) / 4095) as u8
}

/// Adobe-inverted CMYK (as libjpeg-turbo outputs it) → RGB exactly like Pillow: unpack "CMYK;I" (c = 255 − raw),
/// then `cmyk2rgb`: `nk = 255 − k; out = clip(nk − MULDIV255(c, nk))` with `MULDIV255(a, b) = (t + (t >> 8)) >> 8`,
/// `t = a·b + 128`.
fn cmyk_to_rgb(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(3).zip(src.chunks_exact(4)) {
        let nk = i32::from(s[3]); // 255 - k, with k = 255 - raw
        for c in 0..3 {
            let cv = 255 - i32::from(s[c]);
            let t = cv * nk + 128;
            let v = nk - ((t + (t >> 8)) >> 8);
            d[c] = v.clamp(0, 255) as u8;
        }
    }
}
