//! decode/exif — the EXIF orientation of an image, read from its bytes, and the pixel transpose that applies it.
//! Used by the decoder only when the loader asks for it (`exif_transpose=True`; off by default, as torchvision's
//! `ImageFolder` loading ignores EXIF): the header then reports the *oriented* size, so augment plans its crop
//! (RandomResizedCrop's sampling included) on the image as a viewer shows it, and
//! [`super::Decoder::decode_window`] maps the requested window back to stored pixels, decodes only that region
//! (ROI + DCT scaling keep working) and transposes the decoded region into oriented order.
//!
//! Semantics: exactly Pillow's `ImageOps.exif_transpose(Image.open(f))` (Pillow 13), checked against it in
//! `tests/test_exif.py`, including its quirks:
//! - **Where the EXIF comes from.** JPEG: every APP1 segment before the first SOS that starts with `Exif\0\0`,
//!   concatenated (the first whole, the later ones without their 6-byte prefix), then up to two leading `Exif\0\0`
//!   stripped. The concatenation is never built: the segments are read in place as consecutive parts
//!   (`Pieces`), so a file of 800 such segments costs one pass over its markers, not one copy per segment. PNG: the last `eXIf` chunk (anywhere before IEND). WebP (extended format): the first `EXIF` chunk,
//!   when the VP8X header flags one (libwebp's demuxer drops unflagged metadata chunks).
//!   TIFF: the file's own first IFD (classic and BigTIFF). GIF, BMP and Netpbm carry none.
//! - **XMP fallback.** When the EXIF has no Orientation entry at all (no EXIF, or no tag 0x0112 in IFD0), Pillow
//!   searches the XMP packet for `tiff:Orientation="d` or `tiff:Orientation>d`: JPEG's last APP1 starting with
//!   `http://ns.adobe.com/xap/1.0/\0`, WebP's first `XMP ` chunk (when flagged). Not covered: PNG's XMP (iTXt/tEXt text chunks,
//!   possibly compressed) and PNG's "Raw profile type exif" text chunks (ImageMagick's zTXt), so a PNG whose
//!   orientation lives only there stays as stored; GIF's XMP likewise.
//! - **IFD0 walk** (Pillow's `ImageFileDirectory_v2.load`): entries in order; the first entry of a tag wins
//!   (later duplicates are skipped before anything else); entries of an unknown type are skipped; a value that
//!   does not fit in the entry (> 4 bytes, BigTIFF > 8) is read at its offset unless the running total of such
//!   values exceeds the data size (then the entry is skipped), and a value running past the end stops the walk
//!   (entries stored so far are kept); an entry with count 0 is skipped.
//! - **The value.** Pillow converts the stored entry to one number: SHORT, LONG, SBYTE, SSHORT, SLONG, IFD and
//!   LONG8 as integers, RATIONAL/SRATIONAL as exact fractions (den 0 → NaN), FLOAT/DOUBLE as floats; with a count
//!   above 1 the first value counts. Orientation k ∈ 2..=8 applies when the number equals k (`6/1`, `12/2` and
//!   `6.0` all do); anything else (1, 0, 9, 6.5, negative, BYTE/ASCII/UNDEFINED entries) leaves the image as stored
//!   and, being present, still hides the XMP.
//! - **Broken EXIF** (no TIFF header, a header shorter than 8 bytes, BigTIFF inside EXIF, an IFD offset past the
//!   end, a truncated entry table) is never an error: orientation 1. Pillow gets there too — it reads the EXIF
//!   when it opens a JPEG without JFIF density and swallows the error — except for a JPEG whose JFIF header has a
//!   density unit, and for PNG/WebP, where its `exif_transpose` raises instead; here a broken block is simply no
//!   orientation, and the XMP is not consulted after it (as in Pillow's swallowed case).
//!
//! This is a parser of untrusted input: every offset is bounds-checked (safe slice access only, checked
//! arithmetic on file-supplied sizes), nothing is allocated except the list of parts when a JPEG splits its EXIF
//! over several APP1 segments (16 bytes per segment, never their bytes), it runs in time linear in the bytes it
//! looks at (the IFD0 walk reads the entry table and at most 8 bytes of each value, O(log parts) per read), and it
//! is fuzzed (`fuzz/fuzz_targets/exif_orientation.rs`); the split read is checked against the concatenation by
//! the `split_exif_reads_as_its_concatenation` property test.

use super::ImageFormat;

/// The EXIF orientation of an image: how its stored pixels must be transposed to be shown upright. The
/// discriminants are the EXIF values; the names say the operation Pillow's `exif_transpose` applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Orientation {
    /// 1: stored upright (also every value that is not 2..=8, and no EXIF at all).
    #[default]
    Normal = 1,
    /// 2: mirror left ↔ right (`FLIP_LEFT_RIGHT`).
    FlipLeftRight = 2,
    /// 3: rotate 180° (`ROTATE_180`).
    Rotate180 = 3,
    /// 4: mirror top ↔ bottom (`FLIP_TOP_BOTTOM`).
    FlipTopBottom = 4,
    /// 5: swap the axes (`TRANSPOSE`: mirror along the main diagonal).
    Transpose = 5,
    /// 6: rotate 90° clockwise (`ROTATE_270`, counter-clockwise 270°).
    Rotate90Clockwise = 6,
    /// 7: mirror along the anti-diagonal (`TRANSVERSE`).
    Transverse = 7,
    /// 8: rotate 90° counter-clockwise (`ROTATE_90`).
    Rotate90CounterClockwise = 8,
}

/// A rectangle `[x0, x1) × [y0, y1)` in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    /// Left edge (inclusive).
    pub x0: u32,
    /// Top edge (inclusive).
    pub y0: u32,
    /// Right edge (exclusive).
    pub x1: u32,
    /// Bottom edge (exclusive).
    pub y1: u32,
}

impl Orientation {
    /// The orientation of EXIF value `v`: 2..=8 transpose, every other value is [`Orientation::Normal`].
    pub fn from_exif(v: u64) -> Self {
        match v {
            2 => Self::FlipLeftRight,
            3 => Self::Rotate180,
            4 => Self::FlipTopBottom,
            5 => Self::Transpose,
            6 => Self::Rotate90Clockwise,
            7 => Self::Transverse,
            8 => Self::Rotate90CounterClockwise,
            _ => Self::Normal,
        }
    }

    /// The EXIF value (1..=8).
    pub fn exif_value(self) -> u8 {
        self as u8
    }

    /// `(swap, mirror_x, mirror_y)`: stored pixel of oriented (X, Y) is `x = mirror_x ? W-1-a : a`,
    /// `y = mirror_y ? H-1-b : b` with `(a, b) = swap ? (Y, X) : (X, Y)` (W × H the stored size). Checked pixel
    /// for pixel against Pillow's `Image.transpose` in `tests/test_exif.py` and against the definitions below in
    /// the unit tests.
    fn parts(self) -> (bool, bool, bool) {
        match self {
            Self::Normal => (false, false, false),
            Self::FlipLeftRight => (false, true, false),
            Self::Rotate180 => (false, true, true),
            Self::FlipTopBottom => (false, false, true),
            Self::Transpose => (true, false, false),
            Self::Rotate90Clockwise => (true, false, true),
            Self::Transverse => (true, true, true),
            Self::Rotate90CounterClockwise => (true, true, false),
        }
    }

    /// Whether width and height trade places (5..=8).
    pub fn swaps_axes(self) -> bool {
        self.parts().0
    }

    /// The oriented size of a stored `w × h` image.
    pub fn oriented_size(self, w: u32, h: u32) -> (u32, u32) {
        if self.swaps_axes() { (h, w) } else { (w, h) }
    }

    /// The stored rectangle holding the pixels of `oriented` (a rectangle of the oriented image, clamped to it
    /// first and at least one pixel wide and high), for a stored image of `w × h` pixels (both ≥ 1).
    pub fn stored_rect(self, oriented: Rect, w: u32, h: u32) -> Rect {
        let (ow, oh) = self.oriented_size(w, h);
        let x0 = oriented.x0.min(ow - 1);
        let y0 = oriented.y0.min(oh - 1);
        let x1 = oriented.x1.clamp(x0 + 1, ow);
        let y1 = oriented.y1.clamp(y0 + 1, oh);
        let (swap, mx, my) = self.parts();
        let (a, b) = if swap { ((y0, y1), (x0, x1)) } else { ((x0, x1), (y0, y1)) };
        let (sx0, sx1) = if mx { (w - a.1, w - a.0) } else { a };
        let (sy0, sy1) = if my { (h - b.1, h - b.0) } else { b };
        Rect { x0: sx0, y0: sy0, x1: sx1, y1: sy1 }
    }

    /// The oriented rectangle showing the pixels of `stored` (inside a stored `w × h` image).
    pub fn oriented_rect(self, stored: Rect, w: u32, h: u32) -> Rect {
        let (swap, mx, my) = self.parts();
        let a = if mx { (w - stored.x1, w - stored.x0) } else { (stored.x0, stored.x1) };
        let b = if my { (h - stored.y1, h - stored.y0) } else { (stored.y0, stored.y1) };
        let ((x0, x1), (y0, y1)) = if swap { (b, a) } else { (a, b) };
        Rect { x0, y0, x1, y1 }
    }

    /// Write the oriented view of a decoded stored region into `dst` as packed RGB8 rows (replacing its
    /// contents; grown, never shrunk, as the decoder's other scratch). `src` holds the stored rectangle `region`
    /// of a `w × h` image, row `r` at `r * stride`. Returns the oriented rectangle written (its rows are
    /// `3 · width` bytes apart).
    pub fn transpose_region(self, src: &[u8], stride: usize, region: Rect, w: u32, h: u32, dst: &mut Vec<u8>) -> Rect {
        let out = self.oriented_rect(region, w, h);
        let (rw, rh) = ((region.x1 - region.x0) as usize, (region.y1 - region.y0) as usize);
        let (ow, oh) = ((out.x1 - out.x0) as usize, (out.y1 - out.y0) as usize);
        let n = 3 * ow * oh;
        if dst.len() < n {
            dst.resize(n, 0);
        }
        let dst = &mut dst[..n];
        let (swap, mx, my) = self.parts();
        // Local stored column of oriented local column `c` (not swapped) or row (swapped), and so on: the
        // mirrors act on the stored region's own extent, since the region is exactly the preimage of `out`.
        let lx = |i: usize| if mx { rw - 1 - i } else { i };
        let ly = |j: usize| if my { rh - 1 - j } else { j };
        if !swap {
            for r in 0..oh {
                let srow = &src[ly(r) * stride..ly(r) * stride + 3 * rw];
                let drow = &mut dst[r * 3 * ow..(r + 1) * 3 * ow];
                if mx {
                    for (c, d) in drow.chunks_exact_mut(3).enumerate() {
                        let s = 3 * lx(c);
                        d.copy_from_slice(&srow[s..s + 3]);
                    }
                } else {
                    drow.copy_from_slice(srow);
                }
            }
        } else {
            // Oriented (c, r) comes from stored local (x = lx(r), y = ly(c)): a transpose. Tiles of 32 × 32
            // pixels keep both sides in cache (a column walk over a multi-MB region misses on every pixel).
            const TILE: usize = 32;
            for r0 in (0..oh).step_by(TILE) {
                for c0 in (0..ow).step_by(TILE) {
                    for r in r0..(r0 + TILE).min(oh) {
                        let sx = 3 * lx(r);
                        let drow = &mut dst[r * 3 * ow..(r + 1) * 3 * ow];
                        for c in c0..(c0 + TILE).min(ow) {
                            let s = ly(c) * stride + sx;
                            drow[3 * c..3 * c + 3].copy_from_slice(&src[s..s + 3]);
                        }
                    }
                }
            }
        }
        out
    }
}

/// The orientation Pillow's `exif_transpose` applies to `bytes`, an image of `format`. Never fails: anything
/// unreadable is [`Orientation::Normal`] (see the module docs).
pub fn orientation(format: ImageFormat, bytes: &[u8]) -> Orientation {
    match format {
        ImageFormat::Jpeg => jpeg_orientation(bytes),
        ImageFormat::Png => png_orientation(bytes),
        ImageFormat::WebP => webp_orientation(bytes),
        ImageFormat::Tiff => match tiff_orientation(bytes, true) {
            Ok(Some(o)) => o,
            _ => Orientation::Normal,
        },
        ImageFormat::Gif | ImageFormat::Bmp | ImageFormat::Pnm => Orientation::Normal,
    }
}

/// The IFD0 walk found a broken TIFF structure where Pillow raises (orientation 1, XMP not consulted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokenExif;

/// Orientation from an EXIF block (`Exif\0\0` prefixes optional) and, when the EXIF has no Orientation entry,
/// from the XMP packet.
pub fn exif_block_orientation(exif: Option<&[u8]>, xmp: Option<&[u8]>) -> Orientation {
    block_orientation(exif, xmp)
}

/// [`exif_block_orientation`] over any [`TiffBytes`] (a JPEG's EXIF split over APP1 segments reads in place).
fn block_orientation<B: TiffBytes + ?Sized>(exif: Option<&B>, xmp: Option<&[u8]>) -> Orientation {
    let found = match exif {
        Some(block) => {
            // Pillow: re.sub(b"^(Exif\x00\x00){1,2}", b"", data)
            let mut base = 0;
            let mut head = [0u8; 6];
            for _ in 0..2 {
                if block.read(base, &mut head) && &head == b"Exif\0\0" {
                    base += 6;
                }
            }
            let tiff = Shifted { inner: block, base };
            if tiff.size() == 0 { Ok(None) } else { tiff_orientation_in(&tiff, false) }
        }
        None => Ok(None),
    };
    match found {
        Ok(Some(o)) => o,
        Ok(None) => xmp.map_or(Orientation::Normal, xmp_orientation),
        Err(BrokenExif) => Orientation::Normal,
    }
}

/// Pillow's `re.search(rb'tiff:Orientation(="|>)([0-9])', xmp)`: the first match's digit.
pub fn xmp_orientation(xmp: &[u8]) -> Orientation {
    const KEY: &[u8] = b"tiff:Orientation";
    let mut from = 0;
    while let Some(p) = find(&xmp[from..], KEY) {
        let rest = &xmp[from + p + KEY.len()..];
        let digit = match rest {
            [b'=', b'"', d, ..] | [b'>', d, ..] if d.is_ascii_digit() => Some(*d),
            _ => None,
        };
        if let Some(d) = digit {
            return Orientation::from_exif(u64::from(d - b'0'));
        }
        from += p + 1;
    }
    Orientation::Normal
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// JPEG: the APP1 segments before the first SOS (walked like Pillow's and libjpeg's marker readers: junk bytes
/// before a marker and fill bytes are skipped; a segment that runs past the end stops the walk).
fn jpeg_orientation(bytes: &[u8]) -> Orientation {
    let (exif, xmp) = jpeg_metadata(bytes);
    match exif.parts.as_slice() {
        [] => block_orientation::<[u8]>(None, xmp),
        [one] => block_orientation::<[u8]>(Some(one), xmp),
        _ => block_orientation(Some(&exif), xmp),
    }
}

/// The EXIF parts (see [`Pieces`]) and the last XMP packet of a JPEG's APP1 segments before the first SOS. One
/// pass over the marker structure, nothing copied: the segments are borrowed from `bytes`.
fn jpeg_metadata(bytes: &[u8]) -> (Pieces<'_>, Option<&[u8]>) {
    const XMP: &[u8] = b"http://ns.adobe.com/xap/1.0/\0";
    let mut exif = Pieces::default();
    let mut xmp: Option<&[u8]> = None;
    let n = bytes.len();
    if n < 2 || bytes[0] != 0xFF || bytes[1] != 0xD8 {
        return (exif, xmp);
    }
    let mut pos = 2;
    loop {
        while pos < n && bytes[pos] != 0xFF {
            pos += 1;
        }
        while pos < n && bytes[pos] == 0xFF {
            pos += 1;
        }
        let Some(&marker) = bytes.get(pos) else { break };
        pos += 1;
        match marker {
            0xDA | 0xD9 => break, // SOS, EOI: the header ends
            0x00 | 0x01 | 0xD0..=0xD8 => continue,
            _ => {}
        }
        let Some(len) = bytes.get(pos..pos + 2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))) else {
            break;
        };
        let Some(payload) = len.checked_sub(2).and_then(|l| bytes.get(pos + 2..pos + 2 + l)) else { break };
        pos += len;
        if marker != 0xE1 {
            continue;
        }
        if payload.starts_with(b"Exif\0\0") {
            // Pillow: info["exif"] = s for the first, info["exif"] += s[6:] for the later ones (offsets stay
            // relative to the first segment's TIFF header).
            exif.push(if exif.parts.is_empty() { payload } else { &payload[6..] });
        } else if let Some(x) = payload.strip_prefix(XMP) {
            xmp = Some(x); // the last one wins, as in Pillow's info["xmp"]
        }
    }
    (exif, xmp)
}

/// Random access to the bytes of an EXIF/TIFF structure: one slice, or the parts of a JPEG's EXIF split over
/// several APP1 segments, read in place. (Joining the parts copied the block once per segment — 800 segments
/// of a 49 MB file cost 11 s per decode; reading in place costs O(log parts) per read, and the IFD0 walk reads
/// a bounded number of bytes per entry.)
trait TiffBytes {
    /// Length in bytes.
    fn size(&self) -> usize;
    /// Fill `buf` with the bytes at `at..at + buf.len()`; false (and `buf` unspecified) past the end.
    fn read(&self, at: usize, buf: &mut [u8]) -> bool;
}

impl TiffBytes for [u8] {
    fn size(&self) -> usize {
        self.len()
    }

    fn read(&self, at: usize, buf: &mut [u8]) -> bool {
        match at.checked_add(buf.len()).and_then(|end| self.get(at..end)) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

/// One byte string stored as consecutive non-empty parts (the block Pillow builds by concatenating a JPEG's
/// EXIF segments), borrowed, never joined.
#[derive(Debug, Default)]
struct Pieces<'a> {
    parts: Vec<&'a [u8]>,
    /// `ends[i]`: offset just past part `i` in the whole string (strictly increasing).
    ends: Vec<usize>,
}

impl<'a> Pieces<'a> {
    fn push(&mut self, part: &'a [u8]) {
        if !part.is_empty() {
            // Parts are disjoint slices of one file: their total length fits in usize.
            self.ends.push(self.size() + part.len());
            self.parts.push(part);
        }
    }
}

impl TiffBytes for Pieces<'_> {
    fn size(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    fn read(&self, at: usize, buf: &mut [u8]) -> bool {
        if at.checked_add(buf.len()).is_none_or(|end| end > self.size()) {
            return false;
        }
        // The first part ending after `at`, then on through the following parts until `buf` is full.
        let mut i = self.ends.partition_point(|&e| e <= at);
        let mut at = at;
        let mut filled = 0;
        while filled < buf.len() {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            let part = &self.parts[i][at - start..];
            let k = part.len().min(buf.len() - filled);
            buf[filled..filled + k].copy_from_slice(&part[..k]);
            filled += k;
            at += k;
            i += 1;
        }
        true
    }
}

/// `inner` without its first `base` bytes (the stripped `Exif\0\0` prefixes).
struct Shifted<'b, B: ?Sized> {
    inner: &'b B,
    base: usize,
}

impl<B: TiffBytes + ?Sized> TiffBytes for Shifted<'_, B> {
    fn size(&self) -> usize {
        self.inner.size().saturating_sub(self.base)
    }

    fn read(&self, at: usize, buf: &mut [u8]) -> bool {
        at.checked_add(self.base).is_some_and(|at| self.inner.read(at, buf))
    }
}

/// PNG: the last `eXIf` chunk before IEND (Pillow reads the chunks after IDAT too, when it loads the pixels).
fn png_orientation(bytes: &[u8]) -> Orientation {
    let mut pos = 8; // signature
    let mut exif = None;
    while let Some(head) = bytes.get(pos..pos + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let kind = &head[4..8];
        if kind == b"IEND" {
            break;
        }
        let Some(data) = bytes.get(pos + 8..(pos + 8).saturating_add(len)) else { break };
        if kind == b"eXIf" {
            exif = Some(data);
        }
        pos = pos + 12 + len; // length, type, data, CRC: cannot overflow, `data` is inside `bytes`
    }
    exif_block_orientation(exif, None)
}

/// WebP: the first `EXIF` and `XMP ` chunks of the RIFF container, as libwebp's demuxer (which Pillow reads them
/// through) keeps them: only in extended-format files (a VP8X chunk first), and each only when its VP8X flag is
/// set (EXIF 0x08, XMP 0x04; checked against Pillow in `tests/test_exif.py`).
fn webp_orientation(bytes: &[u8]) -> Orientation {
    const EXIF_FLAG: u8 = 0x08;
    const XMP_FLAG: u8 = 0x04;
    if bytes.get(12..16) != Some(b"VP8X".as_slice()) {
        return Orientation::Normal;
    }
    let flags = bytes.get(20).copied().unwrap_or(0);
    let riff_end = bytes
        .get(4..8)
        .map(|b| (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize).saturating_add(8).min(bytes.len()))
        .unwrap_or(0);
    let (mut exif, mut xmp) = (None, None);
    let mut pos = 12;
    while let Some(head) = bytes.get(pos..pos + 8) {
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let Some(data) = bytes[..riff_end].get(pos + 8..(pos + 8).saturating_add(len)) else { break };
        match &head[..4] {
            b"EXIF" if exif.is_none() && flags & EXIF_FLAG != 0 => exif = Some(data),
            b"XMP " if xmp.is_none() && flags & XMP_FLAG != 0 => xmp = Some(data),
            _ => {}
        }
        pos = pos + 8 + len + (len & 1); // chunks are padded to an even size
    }
    exif_block_orientation(exif, xmp)
}

/// Byte order of a TIFF structure.
#[derive(Clone, Copy)]
enum Endian {
    Little,
    Big,
}

/// Read a `W`-byte unsigned integer at `at`, or None past the end.
fn uint(data: &[u8], at: usize, width: usize, e: Endian) -> Option<u64> {
    let b = data.get(at..at.checked_add(width)?)?;
    let mut v = 0u64;
    match e {
        Endian::Big => b.iter().for_each(|&x| v = (v << 8) | u64::from(x)),
        Endian::Little => b.iter().rev().for_each(|&x| v = (v << 8) | u64::from(x)),
    }
    Some(v)
}

/// Read a `W`-byte unsigned integer at `at` of `b`, or None past the end.
fn uint_in<B: TiffBytes + ?Sized>(b: &B, at: usize, width: usize, e: Endian) -> Option<u64> {
    let mut buf = [0u8; 8];
    b.read(at, &mut buf[..width]).then(|| uint(&buf, 0, width, e)).flatten()
}

/// The Orientation entry of the first IFD of `tiff` (a TIFF header at offset 0), walked exactly like Pillow's
/// `ImageFileDirectory_v2.load` (module docs). `Ok(None)`: no Orientation entry was stored; `Err`: the header is
/// one Pillow raises on. `bigtiff`: accept BigTIFF headers (a TIFF file; inside EXIF Pillow reads only 8
/// header bytes and fails on them).
pub fn tiff_orientation(tiff: &[u8], bigtiff: bool) -> Result<Option<Orientation>, BrokenExif> {
    tiff_orientation_in(tiff, bigtiff)
}

/// [`tiff_orientation`] over any [`TiffBytes`]. Reads the header, the entry table and at most 8 bytes of one
/// value per entry: its cost is bounded by the entries it walks, whatever the size of the block.
fn tiff_orientation_in<B: TiffBytes + ?Sized>(tiff: &B, bigtiff: bool) -> Result<Option<Orientation>, BrokenExif> {
    const ORIENTATION: u16 = 0x0112;
    let mut head = [0u8; 4];
    if !tiff.read(0, &mut head) {
        return Err(BrokenExif);
    }
    let e = match &head {
        b"II*\0" | b"II\0*" | b"II+\0" => Endian::Little,
        b"MM\0*" | b"MM*\0" | b"MM\0+" => Endian::Big,
        _ => return Err(BrokenExif),
    };
    let big = head[2] == 43; // Pillow: ifh[2] == 43 ('+'), on the prefixes accepted above
    if big && !bigtiff {
        return Err(BrokenExif);
    }
    // Entry layout: classic 12 bytes (tag, type, u32 count, 4 value bytes); BigTIFF 20 (u64 count, 8 bytes).
    let (ifd_at, count_width, entry_len, inline) = if big {
        (uint_in(tiff, 8, 8, e).ok_or(BrokenExif)?, 8, 20usize, 8u64)
    } else {
        (uint_in(tiff, 4, 4, e).ok_or(BrokenExif)?, 2, 12usize, 4u64)
    };
    let limit = tiff.size() as u64;
    let Ok(mut pos) = usize::try_from(ifd_at) else { return Ok(None) };
    let Some(entries) = uint_in(tiff, pos, count_width, e) else { return Ok(None) };
    pos += count_width;
    // Tags stored so far (Pillow skips later entries of a stored tag before looking at them).
    let mut stored = [0u64; 1024];
    let mut total_size = 0u64;
    let mut entry_buf = [0u8; 20];
    let mut value_buf = [0u8; 8];
    for _ in 0..entries {
        let entry = &mut entry_buf[..entry_len];
        if !tiff.read(pos, entry) {
            return Ok(None);
        }
        let entry = &*entry;
        pos += entry_len;
        let tag = uint(entry, 0, 2, e).unwrap_or(0) as u16;
        let typ = uint(entry, 2, 2, e).unwrap_or(0) as u16;
        // Count: u32 (classic) or u64 (BigTIFF) at byte 4; the value (or its offset) after it.
        let (count, value_at) = if big { (uint(entry, 4, 8, e), 12) } else { (uint(entry, 4, 4, e), 8) };
        let count = count.unwrap_or(0);
        if stored[usize::from(tag >> 6)] & (1 << (tag & 63)) != 0 {
            continue;
        }
        let Some(unit) = unit_size(typ) else { continue };
        let size = count.saturating_mul(unit);
        let data: &[u8] = if size > inline {
            let offset = uint(entry, value_at, inline as usize, e).unwrap_or(0);
            if offset >= 1 << 63 {
                continue; // Pillow: "Tag offset too large"
            }
            total_size = total_size.saturating_add(size);
            if total_size > limit {
                continue; // Pillow: "Tag data larger than file. Skipping tag"
            }
            // size ≤ total_size ≤ limit = tiff.size(): both fit in usize. The whole value must be present
            // (Pillow reads all of it); only its first value (≤ 8 bytes) is looked at.
            let whole = usize::try_from(offset).ok().and_then(|o| Some((o, o.checked_add(size as usize)?)));
            let first = &mut value_buf[..(size as usize).min(8)];
            match whole {
                Some((o, end)) if end <= tiff.size() && tiff.read(o, first) => &*first,
                _ => return Ok(None), // Pillow: "Truncated File Read" ends the walk
            }
        } else {
            &entry[value_at..value_at + size as usize]
        };
        if data.is_empty() {
            continue;
        }
        stored[usize::from(tag >> 6)] |= 1 << (tag & 63);
        if tag == ORIENTATION {
            return Ok(Some(value_orientation(typ, data, e)));
        }
    }
    Ok(None)
}

/// Bytes per value of TIFF type `typ` (Pillow's loaders); None for the types Pillow skips.
fn unit_size(typ: u16) -> Option<u64> {
    Some(match typ {
        1 | 2 | 6 | 7 => 1,    // BYTE, ASCII, SBYTE, UNDEFINED
        3 | 8 => 2,            // SHORT, SSHORT
        4 | 9 | 11 | 13 => 4,  // LONG, SLONG, FLOAT, IFD
        5 | 10 | 12 | 16 => 8, // RATIONAL, SRATIONAL, DOUBLE, LONG8
        _ => return None,
    })
}

/// The orientation of a stored entry's first value as Pillow compares it with 2..=8 (module docs); `data` holds
/// at least one value of `typ`.
fn value_orientation(typ: u16, data: &[u8], e: Endian) -> Orientation {
    let u = |w: usize| uint(data, 0, w, e).unwrap_or(0);
    let integral = |v: f64| {
        if v.fract() == 0.0 && (2.0..=8.0).contains(&v) {
            Orientation::from_exif(v as u64)
        } else {
            Orientation::Normal
        }
    };
    match typ {
        3 => Orientation::from_exif(u(2)),
        4 | 13 => Orientation::from_exif(u(4)),
        16 => Orientation::from_exif(u(8)),
        // Signed: a negative value is no orientation (from_exif of its two's complement is ≥ 2**7 anyway, but
        // be explicit).
        6 => Orientation::from_exif(u64::try_from(u(1) as u8 as i8).unwrap_or(0)),
        8 => Orientation::from_exif(u64::try_from(u(2) as u16 as i16).unwrap_or(0)),
        9 => Orientation::from_exif(u64::try_from(u(4) as u32 as i32).unwrap_or(0)),
        5 | 10 => {
            let (num, den) = if typ == 5 {
                (i64::from(u(4) as u32), i64::from(uint(data, 4, 4, e).unwrap_or(0) as u32))
            } else {
                (i64::from(u(4) as u32 as i32), i64::from(uint(data, 4, 4, e).unwrap_or(0) as u32 as i32))
            };
            // Fraction(num, den) == k exactly (den 0 is NaN in Pillow: never equal).
            match (2..=8i64).find(|k| den != 0 && num == k * den) {
                Some(k) => Orientation::from_exif(k as u64),
                None => Orientation::Normal,
            }
        }
        11 => integral(f64::from(f32::from_bits(u(4) as u32))),
        12 => integral(f64::from_bits(u(8))),
        // BYTE (bytes), ASCII (str), UNDEFINED (bytes): never equal to an int.
        _ => Orientation::Normal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition of each orientation as Pillow's transpose methods state it, on coordinates.
    fn stored_of(o: Orientation, x: u32, y: u32, w: u32, h: u32) -> (u32, u32) {
        match o {
            Orientation::Normal => (x, y),
            Orientation::FlipLeftRight => (w - 1 - x, y),
            Orientation::Rotate180 => (w - 1 - x, h - 1 - y),
            Orientation::FlipTopBottom => (x, h - 1 - y),
            Orientation::Transpose => (y, x),
            // clockwise: the oriented top row is the stored left column read bottom to top
            Orientation::Rotate90Clockwise => (y, h - 1 - x),
            Orientation::Transverse => (w - 1 - y, h - 1 - x),
            // counter-clockwise: the oriented top row is the stored right column read top to bottom
            Orientation::Rotate90CounterClockwise => (w - 1 - y, x),
        }
    }

    const ALL: [Orientation; 8] = [
        Orientation::Normal,
        Orientation::FlipLeftRight,
        Orientation::Rotate180,
        Orientation::FlipTopBottom,
        Orientation::Transpose,
        Orientation::Rotate90Clockwise,
        Orientation::Transverse,
        Orientation::Rotate90CounterClockwise,
    ];

    #[test]
    fn transposed_regions_match_the_pixel_definition() {
        let (w, h) = (37u32, 23u32); // odd, unequal, more than one 32-pixel tile wide
        let px = |x: u32, y: u32| [x as u8, y as u8, (x * 7 + y * 3) as u8];
        let src: Vec<u8> = (0..h).flat_map(|y| (0..w).flat_map(move |x| px(x, y))).collect();
        for o in ALL {
            assert_eq!(Orientation::from_exif(u64::from(o.exif_value())), o);
            let (ow, oh) = o.oriented_size(w, h);
            for region in [
                Rect { x0: 0, y0: 0, x1: w, y1: h },
                Rect { x0: 3, y0: 5, x1: 36, y1: 6 },
                Rect { x0: 10, y0: 1, x1: 11, y1: 23 },
            ] {
                let sub: Vec<u8> =
                    (region.y0..region.y1).flat_map(|y| (region.x0..region.x1).flat_map(move |x| px(x, y))).collect();
                let mut dst = vec![9; 5];
                let stride = 3 * (region.x1 - region.x0) as usize;
                let out = o.transpose_region(&sub, stride, region, w, h, &mut dst);
                assert!(out.x1 <= ow && out.y1 <= oh, "{o:?}");
                assert_eq!(o.stored_rect(out, w, h), region, "{o:?}: preimage of the written rectangle");
                let ow_r = (out.x1 - out.x0) as usize;
                for oy in out.y0..out.y1 {
                    for ox in out.x0..out.x1 {
                        let (sx, sy) = stored_of(o, ox, oy, w, h);
                        let at = 3 * ((oy - out.y0) as usize * ow_r + (ox - out.x0) as usize);
                        assert_eq!(&dst[at..at + 3], &px(sx, sy), "{o:?} at ({ox}, {oy})");
                    }
                }
            }
            // The whole image: also through the full-image path of `src`.
            let mut full = Vec::new();
            o.transpose_region(&src, 3 * w as usize, Rect { x0: 0, y0: 0, x1: w, y1: h }, w, h, &mut full);
            assert_eq!(full.len(), 3 * (ow * oh) as usize);
        }
    }

    #[test]
    fn stored_rect_is_the_preimage_of_an_oriented_window() {
        let (w, h) = (40u32, 25u32);
        for o in ALL {
            let (ow, oh) = o.oriented_size(w, h);
            let win = Rect { x0: 2, y0: 4, x1: ow - 3, y1: oh - 1 };
            let s = o.stored_rect(win, w, h);
            // Every oriented pixel of the window maps inside s, and s has exactly the window's area.
            for y in win.y0..win.y1 {
                for x in win.x0..win.x1 {
                    let (sx, sy) = stored_of(o, x, y, w, h);
                    assert!((s.x0..s.x1).contains(&sx) && (s.y0..s.y1).contains(&sy), "{o:?}");
                }
            }
            assert_eq!((s.x1 - s.x0) * (s.y1 - s.y0), (win.x1 - win.x0) * (win.y1 - win.y0));
            assert_eq!(o.oriented_rect(s, w, h), win);
            // Windows past the image (the caller's are clamped too) stay inside it.
            let s = o.stored_rect(Rect { x0: 1000, y0: 1000, x1: 5000, y1: 0 }, w, h);
            assert!(s.x1 <= w && s.y1 <= h && s.x0 < s.x1 && s.y0 < s.y1, "{o:?}: {s:?}");
        }
    }

    /// A classic TIFF header + IFD0 with `entries` (tag, type, count, 4 value bytes as written), then `tail`.
    fn tiff(big_endian: bool, entries: &[(u16, u16, u32, [u8; 4])], tail: &[u8]) -> Vec<u8> {
        let w16 = |v: u16| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        let w32 = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut t = if big_endian { b"MM\0*".to_vec() } else { b"II*\0".to_vec() };
        t.extend(w32(8));
        t.extend(w16(entries.len() as u16));
        for &(tag, typ, count, v) in entries {
            t.extend(w16(tag));
            t.extend(w16(typ));
            t.extend(w32(count));
            t.extend(v);
        }
        t.extend(w32(0));
        t.extend(tail);
        t
    }

    fn short(v: u16, be: bool) -> [u8; 4] {
        let b = if be { v.to_be_bytes() } else { v.to_le_bytes() };
        [b[0], b[1], 0, 0]
    }

    #[test]
    fn ifd0_orientation_follows_pillows_rules() {
        for be in [false, true] {
            let o = |entries: &[(u16, u16, u32, [u8; 4])]| tiff_orientation(&tiff(be, entries, &[]), false);
            assert_eq!(o(&[(0x0112, 3, 1, short(6, be))]), Ok(Some(Orientation::Rotate90Clockwise)));
            assert_eq!(o(&[]), Ok(None));
            // First entry of a tag wins; an unknown type is skipped (a later one counts); count 0 is skipped.
            assert_eq!(
                o(&[(0x0112, 3, 1, short(3, be)), (0x0112, 3, 1, short(8, be))]),
                Ok(Some(Orientation::Rotate180))
            );
            assert_eq!(
                o(&[(0x0112, 99, 1, short(3, be)), (0x0112, 3, 0, short(5, be)), (0x0112, 3, 1, short(8, be))]),
                Ok(Some(Orientation::Rotate90CounterClockwise))
            );
            // Present but not 2..=8: Normal (and present).
            for v in [0, 1, 9, 0xFFFF] {
                assert_eq!(o(&[(0x0112, 3, 1, short(v, be))]), Ok(Some(Orientation::Normal)));
            }
            // BYTE is bytes in Pillow: never an orientation.
            assert_eq!(o(&[(0x0112, 1, 1, [6, 0, 0, 0])]), Ok(Some(Orientation::Normal)));
            // Two SHORTs: the first counts.
            let two = if be { [0, 5, 0, 1] } else { [5, 0, 1, 0] };
            assert_eq!(o(&[(0x0112, 3, 2, two)]), Ok(Some(Orientation::Transpose)));
            // An out-of-line value past the end stops the walk (the orientation after it is never read).
            let far = if be { 1000u32.to_be_bytes() } else { 1000u32.to_le_bytes() };
            assert_eq!(o(&[(0x010F, 2, 10, far), (0x0112, 3, 1, short(6, be))]), Ok(None));
            // ... but one larger than the whole block is skipped and the walk goes on.
            let huge = (0x010F, 2, u32::MAX, far);
            assert_eq!(o(&[huge, (0x0112, 3, 1, short(6, be))]), Ok(Some(Orientation::Rotate90Clockwise)));
        }
        // Rational 12/2 and float 6.0 equal 6 for Pillow.
        let mut t = tiff(false, &[(0x0112, 5, 1, 26u32.to_le_bytes())], &[]);
        t.extend(12u32.to_le_bytes());
        t.extend(2u32.to_le_bytes());
        assert_eq!(tiff_orientation(&t, false), Ok(Some(Orientation::Rotate90Clockwise)));
        let f = tiff(false, &[(0x0112, 11, 1, 6.0f32.to_le_bytes())], &[]);
        assert_eq!(tiff_orientation(&f, false), Ok(Some(Orientation::Rotate90Clockwise)));
        let f = tiff(false, &[(0x0112, 11, 1, 6.5f32.to_le_bytes())], &[]);
        assert_eq!(tiff_orientation(&f, false), Ok(Some(Orientation::Normal)));
        // Broken headers.
        for bad in [&b""[..], b"II*", b"XX*\0\x08\0\0\0", b"II*\0\x08", b"II+\0\x08\0\0\0"] {
            assert_eq!(tiff_orientation(bad, false), Err(BrokenExif), "{bad:?}");
        }
        // IFD offset past the end, or a truncated entry table: no entry (no error).
        assert_eq!(tiff_orientation(b"II*\0\xFF\0\0\0", false), Ok(None));
        let mut cut = tiff(false, &[(0x0112, 3, 1, short(6, false))], &[]);
        cut.truncate(8 + 2 + 11);
        assert_eq!(tiff_orientation(&cut, false), Ok(None));
    }

    #[test]
    fn xmp_and_exif_blocks() {
        assert_eq!(xmp_orientation(b"<x tiff:Orientation=\"6\"/>"), Orientation::Rotate90Clockwise);
        assert_eq!(xmp_orientation(b"<tiff:Orientation>8</tiff:Orientation>"), Orientation::Rotate90CounterClockwise);
        assert_eq!(xmp_orientation(b"tiff:Orientation=6 tiff:Orientation=\"3\""), Orientation::Rotate180);
        assert_eq!(xmp_orientation(b"tiff:Orientation"), Orientation::Normal);
        let t = tiff(false, &[(0x0112, 3, 1, short(3, false))], &[]);
        let prefixed = [b"Exif\0\0Exif\0\0".as_slice(), &t].concat();
        assert_eq!(exif_block_orientation(Some(&prefixed), None), Orientation::Rotate180);
        // No orientation entry: the XMP decides; a broken block: nothing does.
        let none = tiff(false, &[(0x010F, 2, 2, *b"ab\0\0")], &[]);
        let xmp = b"tiff:Orientation=\"5\"".as_slice();
        assert_eq!(exif_block_orientation(Some(&none), Some(xmp)), Orientation::Transpose);
        assert_eq!(exif_block_orientation(Some(b"Exif\0\0"), Some(xmp)), Orientation::Transpose);
        assert_eq!(exif_block_orientation(Some(b"Exif\0\0junk"), Some(xmp)), Orientation::Normal);
        assert_eq!(exif_block_orientation(Some(&t), Some(xmp)), Orientation::Rotate180);
    }

    /// A JPEG (a real 37×22 image) whose EXIF is split over `segments` APP1 segments of `chunk` TIFF bytes each:
    /// IFD0 holds one entry, Orientation as RATIONAL 6/1, its value stored at the end of the block and
    /// straddling the boundary of the last two segments (so the walk must read across parts).
    pub(crate) fn many_app1_jpeg(segments: usize, chunk: usize) -> Vec<u8> {
        let total = segments * chunk;
        let at = total - chunk - 4;
        let mut block = tiff(false, &[(0x0112, 5, 1, (at as u32).to_le_bytes())], &[]);
        block.resize(total, 0);
        block[at..at + 4].copy_from_slice(&6u32.to_le_bytes());
        block[at + 4..at + 8].copy_from_slice(&1u32.to_le_bytes());
        let px = crate::test_data::pattern(37, 22, 3);
        let image = crate::synthetic::encode::JpegEncoder::new()
            .unwrap()
            .encode(&px, 37, 22, 95, crate::decode::Subsampling::S444)
            .unwrap();
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

    /// Counts the bytes a parse reads from a block.
    struct Counting<'a, B: ?Sized> {
        inner: &'a B,
        read: std::cell::Cell<usize>,
    }

    impl<B: TiffBytes + ?Sized> TiffBytes for Counting<'_, B> {
        fn size(&self) -> usize {
            self.inner.size()
        }
        fn read(&self, at: usize, buf: &mut [u8]) -> bool {
            self.read.set(self.read.get() + buf.len());
            self.inner.read(at, buf)
        }
    }

    /// Hostile-testing report, item 7: 800 EXIF APP1 segments (49 MB) took 11 s per decode with
    /// `exif_transpose`, because each segment re-copied the concatenation so far (quadratic). The parts are now
    /// borrowed from the file and read in place: the walk copies nothing, reads a few dozen bytes of the
    /// 49 MB block, and still finds the orientation whose value straddles the last two segments.
    #[test]
    fn many_exif_segments_are_read_in_place() {
        let j = many_app1_jpeg(800, 61_000);
        assert!(j.len() > 48_000_000);
        let (exif, xmp) = jpeg_metadata(&j);
        assert!(xmp.is_none());
        assert_eq!(exif.parts.len(), 800);
        assert_eq!(exif.size(), 6 + 800 * 61_000);
        let file = j.as_ptr_range();
        for p in &exif.parts {
            // Borrowed from the file, not copied.
            assert!(file.contains(&p.as_ptr()) && p.as_ptr_range().end <= file.end);
        }
        let counting = Counting { inner: &exif, read: std::cell::Cell::new(0) };
        assert_eq!(block_orientation(Some(&counting), None), Orientation::Rotate90Clockwise);
        // Two prefix probes (6 + 6) + header (4 + 4) + entry count (2) + one entry (12) + the value (8).
        assert_eq!(counting.read.get(), 12 + 8 + 2 + 12 + 8, "bytes read from a {} byte block", exif.size());
        assert_eq!(orientation(ImageFormat::Jpeg, &j), Orientation::Rotate90Clockwise);

        // Through the decoder: the oriented size and pixels, as the stored decode transposed.
        let mut stored = Vec::new();
        assert_eq!(crate::decode::Decoder::new().unwrap().decode_full_rgb(&j, &mut stored).unwrap(), (37, 22));
        let limits = crate::decode::DecodeLimits { exif_transpose: true, ..Default::default() };
        let mut d = crate::decode::Decoder::with_limits(limits).unwrap();
        let info = d.read_header(&j).unwrap();
        assert_eq!((info.width, info.height, info.orientation), (22, 37, Orientation::Rotate90Clockwise));
        let mut oriented = Vec::new();
        assert_eq!(d.decode_full_rgb(&j, &mut oriented).unwrap(), (22, 37));
        for y in 0..37u32 {
            for x in 0..22u32 {
                let (sx, sy) = stored_of(Orientation::Rotate90Clockwise, x, y, 37, 22);
                let (o, s) = (3 * (y * 22 + x) as usize, 3 * (sy * 37 + sx) as usize);
                assert_eq!(oriented[o..o + 3], stored[s..s + 3], "({x}, {y})");
            }
        }
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The in-place read of split EXIF agrees with the concatenation Pillow builds, for TIFF blocks with
        /// random entries (types, counts, offsets in and out of range, duplicates) and random bytes, split
        /// anywhere (prefixes included).
        #[test]
        fn split_exif_reads_as_its_concatenation(
            entries in proptest::collection::vec(
                (prop_oneof![Just(0x0112u16), Just(0x010Fu16), any::<u16>()], 0u16..18, 0u32..12, any::<[u8; 4]>(),
                 0u32..96),
                0..6),
            be in any::<bool>(),
            tail in proptest::collection::vec(any::<u8>(), 0..80),
            prefixes in 0usize..3,
            raw in any::<bool>(),
            cuts in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let block = if raw {
                tail.clone()
            } else {
                // Offsets drawn from 0..96 land inside or past the tail.
                let es: Vec<(u16, u16, u32, [u8; 4])> = entries
                    .iter()
                    .map(|&(tag, typ, count, v, off)| {
                        let v = if count * 2 > 4 { if be { off.to_be_bytes() } else { off.to_le_bytes() } } else { v };
                        (tag, typ, count, v)
                    })
                    .collect();
                tiff(be, &es, &tail)
            };
            let whole: Vec<u8> = [b"Exif\0\0".repeat(prefixes), block].concat();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(whole.len())).collect();
            cuts.sort_unstable();
            let mut pieces = Pieces::default();
            let mut from = 0;
            for c in cuts.into_iter().chain([whole.len()]) {
                pieces.push(&whole[from..c]);
                from = c;
            }
            prop_assert_eq!(pieces.size(), whole.len());
            let xmp = Some(b"tiff:Orientation=\"4\"".as_slice());
            prop_assert_eq!(block_orientation(Some(&pieces), xmp), exif_block_orientation(Some(&whole), xmp));
            let mut buf = [0u8; 11];
            for at in 0..whole.len() + 2 {
                let n = (whole.len() + 1).saturating_sub(at).min(11);
                let ok = pieces.read(at, &mut buf[..n]);
                prop_assert_eq!(ok, at + n <= whole.len());
                if ok {
                    prop_assert_eq!(&buf[..n], &whole[at..at + n]);
                }
            }
        }
    }

    #[test]
    fn containers() {
        let t = tiff(true, &[(0x0112, 3, 1, short(7, true))], &[]);
        // JPEG: EXIF split over two APP1 segments (the second continues the first's TIFF data).
        let (a, b) = t.split_at(10);
        let mut j = vec![0xFF, 0xD8];
        for (i, part) in [a, b].iter().enumerate() {
            let payload = [b"Exif\0\0".as_slice(), part].concat();
            j.extend([0xFF, 0xE1]);
            j.extend(((payload.len() + 2) as u16).to_be_bytes());
            j.extend(&payload);
            if i == 0 {
                j.extend([0xFF, 0xFE, 0, 3, b'c']); // a COM segment between them
            }
        }
        j.extend([0xFF, 0xDA, 0, 2, 0xFF, 0xD9]);
        assert_eq!(orientation(ImageFormat::Jpeg, &j), Orientation::Transverse);
        // Truncated inside the second segment: the first alone has no complete IFD.
        assert_eq!(orientation(ImageFormat::Jpeg, &j[..j.len() - 12]), Orientation::Normal);
        // PNG: the last eXIf chunk.
        let chunk = |kind: &[u8], data: &[u8]| {
            let mut c = (data.len() as u32).to_be_bytes().to_vec();
            c.extend(kind);
            c.extend(data);
            c.extend([0; 4]);
            c
        };
        let t3 = tiff(false, &[(0x0112, 3, 1, short(3, false))], &[]);
        let png = [b"\x89PNG\r\n\x1a\n".as_slice(), &chunk(b"eXIf", &t), &chunk(b"IDAT", b"x"), &chunk(b"eXIf", &t3)]
            .concat();
        assert_eq!(orientation(ImageFormat::Png, &png), Orientation::Rotate180);
        // WebP: the first EXIF chunk, odd sizes padded.
        let webp = |flags: u8| {
            let mut body = b"WEBPVP8X".to_vec();
            body.extend(10u32.to_le_bytes());
            body.extend([flags, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            let xmp = b"tiff:Orientation=\"5\"".as_slice();
            for (kind, data) in [(b"XMP ", xmp), (b"EXIF", &t3), (b"EXIF", &t)] {
                body.extend(kind);
                body.extend((data.len() as u32).to_le_bytes());
                body.extend(data);
                if data.len() % 2 == 1 {
                    body.push(0);
                }
            }
            [b"RIFF".as_slice(), &(body.len() as u32).to_le_bytes(), &body].concat()
        };
        assert_eq!(orientation(ImageFormat::WebP, &webp(0x0C)), Orientation::Rotate180);
        // A chunk whose VP8X flag is clear does not exist for libwebp's demuxer (nor for Pillow).
        assert_eq!(orientation(ImageFormat::WebP, &webp(0x04)), Orientation::Transpose);
        assert_eq!(orientation(ImageFormat::WebP, &webp(0x00)), Orientation::Normal);
        // TIFF: its own IFD0; BigTIFF too.
        assert_eq!(orientation(ImageFormat::Tiff, &t), Orientation::Transverse);
        let mut big = b"II+\0\x08\0\0\0\x10\0\0\0\0\0\0\0".to_vec();
        big.extend(1u64.to_le_bytes());
        big.extend(0x0112u16.to_le_bytes());
        big.extend(3u16.to_le_bytes());
        big.extend(1u64.to_le_bytes());
        big.extend([8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(orientation(ImageFormat::Tiff, &big), Orientation::Rotate90CounterClockwise);
        assert_eq!(tiff_orientation(&big, false), Err(BrokenExif));
    }
}
