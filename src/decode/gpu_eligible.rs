//! decode/gpu_eligible — may this sample's bytes go to nvJPEG's hardware engines (docs/design/gpu-decode.md)? Decided
//! from the JPEG header alone, on a CPU worker, once per sample, before the router draws its coin: a file that is not
//! eligible takes the CPU path (never an error). nvJPEG's own `nvjpegDecodeBatchedSupportedEx` on the decode thread
//! stays the final word; this check only keeps files away from it that the hardware backend cannot take or that would
//! decode differently from the CPU path (docs/design/gpu-decode.md §0.2 and §6).
//!
//! **Eligible iff** all of the following hold. The reason reported is the first failure met: rules 1–5 (and
//! malformed segments) are answered at the segment that breaks them, i.e. in file order, so a progressive CMYK
//! file is `Progressive` whatever else it has; rules 6–10 need the whole header and are checked at the first SOS
//! (scan shape 7, tables 6, then 8, 9, 10), so a 16-bit table in an SOF1 file still reports `ExtendedSequential`.
//! 1. the bytes start with SOI (`FF D8`) — else [`Ineligible::NotJpeg`] (PNGs named `.JPEG` land here) — and are
//!    at most `max_file_bytes` long ([`Ineligible::FileTooLarge`]);
//! 2. the segments up to and including the first SOS header are complete ([`Ineligible::Truncated`]), follow each
//!    other with nothing but `FF` fill bytes in between ([`Ineligible::ExtraneousBytes`]: libjpeg skips such junk
//!    with a warning, a strict parser may not), and are only SOF0/SOF1, DHT, DQT, DRI, APPn, COM
//!    ([`Ineligible::UnexpectedMarker`] for RSTn, SOI, EOI, TEM, DNL, JPG, JPGn and reserved codes);
//! 3. the frame is **SOF0** (baseline Huffman): SOF2 → [`Ineligible::Progressive`], SOF3 → `Lossless`, SOF5–7 and
//!    DHP/EXP → `Hierarchical`, SOF9–15 and DAC → `Arithmetic`; SOF1 (extended sequential) → `Precision` when
//!    its samples are not 8-bit, else `ExtendedSequential`;
//! 4. 8-bit samples; 1 component, or 3 (4 → `Cmyk`, others → `Components`); 1 ≤ width, height ≤
//!    [`GPU_MAX_DIMENSION`] (`Dimensions`; width and height are the SOF's, i.e. of the *stored* image);
//! 5. sampling factors: gray 1×1; colour with both chroma components 1×1 and luma 1×1 (4:4:4), 2×1 (4:2:2),
//!    2×2 (4:2:0) or 1×2 (4:4:0) — nvImageCodec's hardware set; 4:1:1 and everything else → `Sampling`;
//! 6. baseline tables only: 8-bit quantization tables, Huffman tables 0 and 1 (`NonBaselineTables`), and every
//!    table the frame and the first scan use is defined before that scan (`MissingTable`);
//! 7. **one scan**: the first SOS lists every component of the frame, in frame order, with the baseline spectral
//!    selection (0..63, no successive approximation). A baseline file whose first scan holds fewer components is
//!    non-interleaved: it has one scan per component, which the hardware backend does not take (`MultiScan`);
//! 8. colour: a 3-component file must be YCbCr-coded — no Adobe APP14 with transform 0 and no component ids
//!    `'R','G','B'` (`RgbCoded`: libjpeg-turbo decodes both as RGB unless a JFIF marker says YCbCr; refused
//!    either way), and no Adobe transform other than 1 (`AdobeTransform`);
//! 9. no restart interval: a DRI with a non-zero interval → `RestartInterval` (conservative until the device test
//!    of `restart_markers_dri13__rgb.jpg` shows the hardware path decodes it like the CPU);
//! 10. EXIF orientation as the CPU path reads it ([`super::exif::orientation`], Pillow's rules: EXIF in APP1,
//!     XMP fallback) is `Normal` — absent, 1, or a value Pillow ignores (`Orientation`). The GPU path writes
//!     stored pixels; with `exif_transpose` the CPU path would rotate them;
//! 11. the file's last two bytes are EOI (`FF D9`), else [`Ineligible::NoEndMarker`]: nvJPEG's hardware engines
//!     decode a truncated scan without an error (measured on the H200), where the CPU path raises `Corrupt` as
//!     Pillow does; a file with data after its EOI goes to the CPU path too, which ignores it.
//!
//! A segment that libjpeg would reject, or that contradicts itself (a length that does not match its content, a
//! second SOF, a scan before the frame, an over-subscribed Huffman code, a DC symbol above 15, sampling factors
//! outside 1..=4, duplicate component ids, a table index above 3), is [`Ineligible::Malformed`].
//!
//! **What it does not check.** The entropy-coded data after the first SOS header is not read: that keeps the call
//! at ~0.2 µs per ImageNet file, where [`super::markers::walk_jpeg`] (which the CPU path runs to find truncation)
//! scans the whole file in 10–19 µs. Rule 11 catches a file cut anywhere (it no longer ends with EOI); damaged
//! entropy data inside a complete file is decoded by nvJPEG as it decodes it (the CPU path fills it in, as
//! Pillow, and counts a decode warning), and a file nvJPEG refuses falls back to the CPU path. The pixel limit
//! ([`super::DecodeLimits::max_pixels`], default 100 MP) is not applied here either: [`GPU_MAX_DIMENSION`]²
//! is 268 MP, so the caller compares `width × height` with its own limit.
//!
//! Cost: no allocation (except inside the EXIF reader for a file that splits its EXIF over several APP1
//! segments), one pass over the header segments; the EXIF reader runs only when an APP1 segment exists.
//! This is a parser of untrusted input: safe slice access only, fuzzed by `fuzz/fuzz_targets/gpu_eligible.rs`
//! and the proptests of `gpu_eligible_tests.rs` (whose oracle is libjpeg-turbo's own header read).

#![forbid(unsafe_code)]

use super::exif::{self, Orientation};
use super::markers::code::{APP0, APP1, APP14, APP15, COM, DHT, DQT, DRI, SOF0, SOF1, SOI, SOS};
use super::{ImageFormat, Subsampling};

/// Largest width and height sent to the GPU (nvJPEG's hardware engines; docs/design/gpu-decode.md §6).
pub const GPU_MAX_DIMENSION: u32 = 16384;

/// The subsamplings nvJPEG's hardware decodes: the chroma layouts a GPU-eligible JPEG may have (one component 1×1,
/// or three with 1×1 chroma and luma 1×1, 2×1, 2×2 or 1×2; the layout decides which nvJPEG handle decodes it), in
/// [`Subsampling::index`] order (for per-subsampling counters).
pub const GPU_SUBSAMPLINGS: [Subsampling; 5] =
    [Subsampling::S444, Subsampling::S422, Subsampling::S420, Subsampling::Gray, Subsampling::S440];

/// Header facts of a GPU-eligible JPEG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuJpeg {
    /// Width of the stored image (the SOF's; EXIF orientation is `Normal` for every eligible file).
    pub width: u32,
    /// Height of the stored image.
    pub height: u32,
    /// Chroma layout (one of [`GPU_SUBSAMPLINGS`]).
    pub subsampling: Subsampling,
}

/// Why a file goes to the CPU path. Cheap to produce and count: a fieldless `Copy` enum with a stable short name
/// ([`Ineligible::as_str`], for counters and `trdata info`-style reports) and a sentence ([`std::fmt::Display`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ineligible {
    /// Does not start with SOI (`FF D8`): PNG, other formats, empty.
    NotJpeg,
    /// Longer than `max_file_bytes`.
    FileTooLarge,
    /// The data ends before the first scan header is complete.
    Truncated,
    /// Bytes other than `FF` fill between two segments of the header.
    ExtraneousBytes,
    /// A marker that does not belong before the first scan (RSTn, SOI, EOI, TEM, DNL, JPGn, reserved).
    UnexpectedMarker,
    /// A header segment libjpeg rejects or that contradicts itself (see the module docs).
    Malformed,
    /// Progressive (SOF2).
    Progressive,
    /// Lossless (SOF3).
    Lossless,
    /// Hierarchical / differential (SOF5–7, DHP, EXP).
    Hierarchical,
    /// Arithmetic-coded (SOF9–15, DAC).
    Arithmetic,
    /// Extended sequential (SOF1) with 8-bit samples (e.g. 16-bit quantization tables).
    ExtendedSequential,
    /// Sample precision other than 8 bits (12-bit JPEGs).
    Precision,
    /// Four components (CMYK or YCCK).
    Cmyk,
    /// Neither 1 nor 3 (nor 4) components.
    Components,
    /// Sampling factors outside gray 1×1 / 4:4:4 / 4:2:2 / 4:2:0 / 4:4:0 (4:1:1, 4:1:0, unusual layouts).
    Sampling,
    /// Width or height 0 or above [`GPU_MAX_DIMENSION`].
    Dimensions,
    /// A 16-bit quantization table, or a Huffman table index above 1 (outside baseline).
    NonBaselineTables,
    /// A quantization or Huffman table the frame or first scan uses is not defined before the scan.
    MissingTable,
    /// The first scan does not hold every component: a non-interleaved (multi-scan) baseline file.
    MultiScan,
    /// A 3-component file coded as RGB (Adobe transform 0, or component ids `'R','G','B'`).
    RgbCoded,
    /// A 3-component file with an Adobe color transform other than 0 (RGB) or 1 (YCbCr).
    AdobeTransform,
    /// A restart interval (DRI) above 0.
    RestartInterval,
    /// An EXIF (or XMP) orientation other than upright.
    Orientation,
    /// The file does not end with the EOI marker (`FF D9`): truncated, or followed by other data. The CPU path
    /// decides (a truncated file is an error there, as in Pillow; trailing data after EOI is ignored); nvJPEG's
    /// hardware engines decode a truncated scan without complaint.
    NoEndMarker,
}

impl Ineligible {
    /// Every reason, in declaration order (for per-reason counters: `counters[reason.index()]`).
    pub const ALL: [Self; 24] = [
        Self::NotJpeg,
        Self::FileTooLarge,
        Self::Truncated,
        Self::ExtraneousBytes,
        Self::UnexpectedMarker,
        Self::Malformed,
        Self::Progressive,
        Self::Lossless,
        Self::Hierarchical,
        Self::Arithmetic,
        Self::ExtendedSequential,
        Self::Precision,
        Self::Cmyk,
        Self::Components,
        Self::Sampling,
        Self::Dimensions,
        Self::NonBaselineTables,
        Self::MissingTable,
        Self::MultiScan,
        Self::RgbCoded,
        Self::AdobeTransform,
        Self::RestartInterval,
        Self::Orientation,
        Self::NoEndMarker,
    ];

    /// Position in [`Ineligible::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Stable short name (snake_case), for counters and reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotJpeg => "not_jpeg",
            Self::FileTooLarge => "file_too_large",
            Self::Truncated => "truncated",
            Self::ExtraneousBytes => "extraneous_bytes",
            Self::UnexpectedMarker => "unexpected_marker",
            Self::Malformed => "malformed",
            Self::Progressive => "progressive",
            Self::Lossless => "lossless",
            Self::Hierarchical => "hierarchical",
            Self::Arithmetic => "arithmetic",
            Self::ExtendedSequential => "extended_sequential",
            Self::Precision => "precision",
            Self::Cmyk => "cmyk",
            Self::Components => "components",
            Self::Sampling => "sampling",
            Self::Dimensions => "dimensions",
            Self::NonBaselineTables => "non_baseline_tables",
            Self::MissingTable => "missing_table",
            Self::MultiScan => "multi_scan",
            Self::RgbCoded => "rgb_coded",
            Self::AdobeTransform => "adobe_transform",
            Self::RestartInterval => "restart_interval",
            Self::Orientation => "orientation",
            Self::NoEndMarker => "no_end_marker",
        }
    }

    /// One sentence saying why (what [`std::fmt::Display`] prints).
    pub const fn describe(self) -> &'static str {
        match self {
            Self::NotJpeg => "not a JPEG (no SOI marker)",
            Self::FileTooLarge => "file larger than the GPU path's size limit",
            Self::Truncated => "data ends before the first scan header is complete",
            Self::ExtraneousBytes => "extraneous bytes between header segments",
            Self::UnexpectedMarker => "a marker that does not belong before the first scan",
            Self::Malformed => "a malformed header segment",
            Self::Progressive => "progressive JPEG",
            Self::Lossless => "lossless JPEG",
            Self::Hierarchical => "hierarchical JPEG",
            Self::Arithmetic => "arithmetic-coded JPEG",
            Self::ExtendedSequential => "extended-sequential (SOF1) JPEG",
            Self::Precision => "sample precision other than 8 bits",
            Self::Cmyk => "4-component (CMYK/YCCK) JPEG",
            Self::Components => "neither 1 nor 3 components",
            Self::Sampling => "chroma sampling other than gray/4:4:4/4:2:2/4:2:0/4:4:0",
            Self::Dimensions => "width or height 0 or above 16384",
            Self::NonBaselineTables => "16-bit quantization table or Huffman table index above 1",
            Self::MissingTable => "a table used by the frame or scan is not defined",
            Self::MultiScan => "first scan does not hold every component (non-interleaved)",
            Self::RgbCoded => "RGB-coded 3-component JPEG (Adobe transform 0 or RGB component ids)",
            Self::AdobeTransform => "Adobe color transform other than YCbCr",
            Self::RestartInterval => "restart interval (DRI) above 0",
            Self::Orientation => "EXIF orientation other than upright",
            Self::NoEndMarker => "the file does not end with the EOI marker (truncated, or trailing data)",
        }
    }
}

impl std::fmt::Display for Ineligible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

impl std::error::Error for Ineligible {}

/// Whether `bytes` may be decoded by nvJPEG's hardware backend, and if so its size and chroma layout; otherwise
/// why not. Pure function of the bytes and the size limit (see the module docs for the rules).
pub fn gpu_eligible(bytes: &[u8], max_file_bytes: usize) -> Result<GpuJpeg, Ineligible> {
    let (jpeg, _) = walk_header(bytes, max_file_bytes)?;
    if !bytes.ends_with(&[0xFF, 0xD9]) {
        return Err(Ineligible::NoEndMarker);
    }
    Ok(jpeg)
}

/// The frame header (SOF0) of an eligible file.
#[derive(Clone, Copy)]
struct Frame {
    width: u32,
    height: u32,
    /// 1 or 3.
    components: usize,
    ids: [u8; 3],
    quant_tables: [u8; 3],
    subsampling: Subsampling,
}

/// What the header said before the first scan.
#[derive(Default)]
struct Header {
    frame: Option<Frame>,
    /// Defined (non-empty) Huffman tables: `[class][index]`, class 0 = DC, 1 = AC.
    huffman: [[bool; 4]; 2],
    quant: [bool; 4],
    /// A 16-bit quantization table or a Huffman table index above 1 was defined (refused at the scan, so that
    /// the reason does not depend on whether DQT/DHT come before or after an SOF1/SOF2 frame).
    non_baseline_tables: bool,
    restart: bool,
    adobe_rgb: bool,
    adobe_other: bool,
    app1: bool,
}

/// [`gpu_eligible`] plus the offset just past the first SOS header (the bytes it looked at; used by tests).
pub(super) fn walk_header(bytes: &[u8], max_file_bytes: usize) -> Result<(GpuJpeg, usize), Ineligible> {
    use Ineligible as E;
    if bytes.len() < 2 || bytes[0] != 0xFF || bytes[1] != SOI {
        return Err(E::NotJpeg);
    }
    if bytes.len() > max_file_bytes {
        return Err(E::FileTooLarge);
    }
    let n = bytes.len();
    let mut h = Header::default();
    let mut pos = 2usize;
    loop {
        match bytes.get(pos) {
            Some(0xFF) => {}
            Some(_) => return Err(E::ExtraneousBytes),
            None => return Err(E::Truncated),
        }
        while pos < n && bytes[pos] == 0xFF {
            pos += 1; // fill bytes
        }
        let Some(&marker) = bytes.get(pos) else { return Err(E::Truncated) };
        pos += 1;
        // Disqualifying markers are answered before their length is read: the reason does not depend on the
        // rest of the file.
        match marker {
            SOF0 | SOF1 | DHT | DQT | DRI | SOS | APP0..=APP15 | COM => {}
            0xC2 => return Err(E::Progressive),
            0xC3 => return Err(E::Lossless),
            0xC5..=0xC7 | 0xDE | 0xDF => return Err(E::Hierarchical),
            0xC9..=0xCF => return Err(E::Arithmetic), // SOF9–11, DAC, SOF13–15
            _ => return Err(E::UnexpectedMarker),
        }
        let Some(len) = bytes.get(pos..pos + 2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))) else {
            return Err(E::Truncated);
        };
        if len < 2 {
            return Err(E::Malformed);
        }
        let Some(seg) = bytes.get(pos + 2..pos + len) else { return Err(E::Truncated) };
        pos += len;
        match marker {
            SOF0 | SOF1 => {
                if h.frame.is_some() {
                    return Err(E::Malformed); // libjpeg: "Invalid JPEG file structure: two SOF markers"
                }
                h.frame = Some(frame(seg, marker)?);
            }
            DHT => huffman_tables(seg, &mut h)?,
            DQT => quant_tables(seg, &mut h)?,
            DRI => {
                let [a, b] = seg else { return Err(E::Malformed) };
                h.restart |= u16::from_be_bytes([*a, *b]) != 0;
            }
            APP1 => h.app1 = true,
            // libjpeg's examine_app14: "Adobe" and at least 12 bytes; the transform is byte 11.
            APP14 if seg.len() >= 12 && seg.starts_with(b"Adobe") => match seg[11] {
                0 => h.adobe_rgb = true,
                1 => {}
                _ => h.adobe_other = true,
            },
            SOS => return scan(seg, &h, bytes).map(|jpeg| (jpeg, pos)),
            _ => {} // other APPn, COM
        }
    }
}

/// Parse SOF0/SOF1 (`seg`: the segment after its length field).
fn frame(seg: &[u8], marker: u8) -> Result<Frame, Ineligible> {
    use Ineligible as E;
    let [precision, h1, h0, w1, w0, nf, comps @ ..] = seg else { return Err(E::Malformed) };
    let nf = usize::from(*nf);
    if comps.len() != 3 * nf {
        return Err(E::Malformed); // libjpeg: "Bogus marker length"
    }
    if *precision != 8 {
        return Err(E::Precision);
    }
    if marker == SOF1 {
        return Err(E::ExtendedSequential);
    }
    match nf {
        1 | 3 => {}
        4 => return Err(E::Cmyk),
        _ => return Err(E::Components),
    }
    let height = u32::from(u16::from_be_bytes([*h1, *h0]));
    let width = u32::from(u16::from_be_bytes([*w1, *w0]));
    if !(1..=GPU_MAX_DIMENSION).contains(&width) || !(1..=GPU_MAX_DIMENSION).contains(&height) {
        return Err(E::Dimensions);
    }
    let mut ids = [0u8; 3];
    let mut quant_tables = [0u8; 3];
    let mut factors = [(0u8, 0u8); 3];
    for (i, c) in comps.chunks_exact(3).enumerate() {
        let (hf, vf) = (c[1] >> 4, c[1] & 15);
        if !(1..=4).contains(&hf) || !(1..=4).contains(&vf) || c[2] > 3 || ids[..i].contains(&c[0]) {
            return Err(E::Malformed);
        }
        ids[i] = c[0];
        quant_tables[i] = c[2];
        factors[i] = (hf, vf);
    }
    let subsampling = if nf == 1 {
        match factors[0] {
            (1, 1) => Subsampling::Gray,
            _ => return Err(E::Sampling),
        }
    } else {
        if factors[1] != (1, 1) || factors[2] != (1, 1) {
            return Err(E::Sampling);
        }
        match factors[0] {
            (1, 1) => Subsampling::S444,
            (2, 1) => Subsampling::S422,
            (2, 2) => Subsampling::S420,
            (1, 2) => Subsampling::S440,
            _ => return Err(E::Sampling),
        }
    };
    Ok(Frame { width, height, components: nf, ids, quant_tables, subsampling })
}

/// Parse a DHT segment (one or more tables), with libjpeg-turbo's checks (`get_dht`, `jpeg_make_d_derived_tbl`).
fn huffman_tables(mut seg: &[u8], h: &mut Header) -> Result<(), Ineligible> {
    use Ineligible as E;
    while let [tc_th, rest @ ..] = seg {
        let (class, index) = (usize::from(tc_th >> 4), usize::from(tc_th & 15));
        if class > 1 || index > 3 || rest.len() < 16 {
            return Err(E::Malformed);
        }
        let counts = &rest[..16];
        let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
        let Some(values) = rest.get(16..16 + total) else { return Err(E::Malformed) };
        if total > 256 {
            return Err(E::Malformed);
        }
        // Canonical codes must fit their lengths and none may be all ones (libjpeg: JERR_BAD_HUFF_TABLE).
        let mut code = 0u32;
        for (bits, &count) in (1u32..).zip(counts) {
            code += u32::from(count);
            if count > 0 && code >= 1 << bits {
                return Err(E::Malformed);
            }
            code <<= 1;
        }
        if class == 0 && values.iter().any(|&v| v > 15) {
            return Err(E::Malformed);
        }
        h.non_baseline_tables |= index > 1;
        // An empty table decodes nothing: treat it as absent.
        h.huffman[class][index] |= total > 0;
        seg = &rest[16 + total..];
    }
    Ok(())
}

/// Parse a DQT segment (one or more tables).
fn quant_tables(mut seg: &[u8], h: &mut Header) -> Result<(), Ineligible> {
    use Ineligible as E;
    while let [pq_tq, rest @ ..] = seg {
        let (precision, index) = (pq_tq >> 4, usize::from(pq_tq & 15));
        let size = match precision {
            0 => 64,
            1 => 128,
            _ => return Err(E::Malformed),
        };
        // A short table: libjpeg fills it with ones and carries on; refuse it.
        if index > 3 || rest.len() < size {
            return Err(E::Malformed);
        }
        h.non_baseline_tables |= precision == 1;
        h.quant[index] = true;
        seg = &rest[size..];
    }
    Ok(())
}

/// The first SOS header (`seg`) and the checks that need the whole header.
fn scan(seg: &[u8], h: &Header, bytes: &[u8]) -> Result<GpuJpeg, Ineligible> {
    use Ineligible as E;
    let Some(f) = h.frame else { return Err(E::Malformed) }; // a scan before the frame
    let [ns, rest @ ..] = seg else { return Err(E::Malformed) };
    let ns = usize::from(*ns);
    if !(1..=4).contains(&ns) || rest.len() != 2 * ns + 3 {
        return Err(E::Malformed);
    }
    if ns > f.components {
        return Err(E::Malformed);
    }
    if ns < f.components {
        return Err(E::MultiScan);
    }
    let (selectors, spectral) = rest.split_at(2 * ns);
    for (i, s) in selectors.chunks_exact(2).enumerate() {
        let (dc, ac) = (usize::from(s[1] >> 4), usize::from(s[1] & 15));
        if s[0] != f.ids[i] || dc > 3 || ac > 3 {
            return Err(E::Malformed);
        }
        if dc > 1 || ac > 1 {
            return Err(E::NonBaselineTables);
        }
        if !h.huffman[0][dc] || !h.huffman[1][ac] {
            return Err(E::MissingTable);
        }
    }
    // Sequential: spectral selection 0..63, no successive approximation.
    if spectral != [0, 63, 0] {
        return Err(E::Malformed);
    }
    if h.non_baseline_tables {
        return Err(E::NonBaselineTables);
    }
    if f.quant_tables[..f.components].iter().any(|&t| !h.quant[usize::from(t)]) {
        return Err(E::MissingTable);
    }
    if f.components == 3 {
        if h.adobe_rgb || f.ids == *b"RGB" {
            return Err(E::RgbCoded);
        }
        if h.adobe_other {
            return Err(E::AdobeTransform);
        }
    }
    if h.restart {
        return Err(E::RestartInterval);
    }
    // Only files with an APP1 segment can carry EXIF or XMP orientation: skip the second walk otherwise.
    if h.app1 && exif::orientation(ImageFormat::Jpeg, bytes) != Orientation::Normal {
        return Err(E::Orientation);
    }
    Ok(GpuJpeg { width: f.width, height: f.height, subsampling: f.subsampling })
}
