//! decode/markers — a small walker over a JPEG's marker structure, run on the bytes before libjpeg-turbo decodes
//! them. It decides two things *from the bytes alone*, never from the crop being decoded:
//!
//! - **Truncation.** A JPEG whose entropy-coded data runs into the end of the file without an EOI marker is
//!   truncated → `Corrupt` (Pillow's default "image file is truncated"). libjpeg-turbo stops reading once the
//!   cropping region's last row is decoded, so without this check a file missing its last quarter failed for crops
//!   near its bottom and silently "decoded" for the others: the same file was an error in one epoch and a sample
//!   in the next.
//! - **Scan count.** The number of SOS segments, for the scan limit ([`super::DecodeLimits::max_scans`]), checked
//!   before any pixel work (libjpeg-turbo's own `TJPARAM_SCANLIMIT` only fires during the decode).
//!
//! Walk (mirrors libjpeg's `next_marker`/`skip_variable`): SOI; then repeatedly skip any bytes up to a `0xFF`
//! (libjpeg tolerates "extraneous bytes before marker", and Pillow decodes such files), skip `0xFF` fill bytes,
//! read the marker code. Standalone markers (TEM, RST0–7, SOI) have no length; EOI ends the image; every other
//! marker has a big-endian length ≥ 2 that is followed exactly (so APP1 EXIF thumbnails, whose own SOI…EOI live
//! inside the APP1 payload, are never seen). After an SOS header the entropy-coded data is scanned for the next
//! marker: `FF 00` is a stuffed data byte, `FF D0`–`FF D7` are restart markers, `FF FF` is fill; anything else
//! is the next marker (DHT/DQT/SOS of the next progressive scan, DNL, EOI). The walk stops at the first EOI, so an
//! MPO's second frame or trailing garbage after the image are not examined.
//!
//! - **Table use.** Whether every scan finds the quantization and Huffman tables it uses defined *in this file*,
//!   before that scan ([`JpegStructure::borrows_tables`]). libjpeg keeps the DQT/DHT tables of earlier images in
//!   its handle ("abbreviated datastreams"), so a file that relies on a table it does not define would decode
//!   with whatever the handle decoded before; the decoder gives such files a fresh handle (`Decoder`, module
//!   docs "Fresh tables"). The rule mirrors libjpeg-turbo 3.1: a component's quantization table is latched at
//!   the first scan holding it (`latch_quant_tables`; not for lossless frames), sequential Huffman scans use the
//!   DC and AC table of each component (`start_pass_huff_decoder`), progressive Huffman scans the DC table for a
//!   first DC scan, none for a DC refinement, the AC table for an AC scan (`start_pass_phuff_decoder`), lossless
//!   Huffman scans the DC table (`start_pass_lhuff_decoder`), arithmetic scans no Huffman table (their DAC
//!   conditioning values are reset at SOI). Anything libjpeg would reject in a segment that matters here (a
//!   malformed DQT/DHT/SOF/SOS, a second SOF, a scan before the frame, a table index above 3, a marker libjpeg
//!   refuses) also counts as borrowing: such a file takes the fresh handle too, which is always correct.
//!
//! This is a parser of untrusted input: every index is bounds-checked (safe slice access only, no `unsafe`),
//! it never allocates, runs in one linear pass, and is fuzzed (`fuzz/fuzz_targets/jpeg_markers.rs`).
//! The entropy scan looks at 8 bytes per step (SWAR test for a `0xFF` byte), so its cost is a small fraction of
//! a decode (figures in the `marker_walk_cost` test note and the decode module docs).

/// What the walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JpegStructure {
    /// Number of SOS segments (scans) before the EOI.
    pub scans: u32,
    /// Offset just past the EOI marker.
    pub end: usize,
    /// Some scan uses a quantization or Huffman table slot that this file does not define before that scan, or
    /// the file holds something libjpeg rejects (see the module docs): decoding it on a libjpeg handle that
    /// decoded other images could read their tables, so it must be decoded on a fresh handle.
    pub borrows_tables: bool,
}

/// Why the walk failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerError {
    /// The data does not start with SOI (`FF D8`).
    NoSoi,
    /// The file ends before the EOI marker (inside a segment or inside entropy-coded data).
    Truncated {
        /// Offset where the walk ran out of data.
        at: usize,
        /// Scans seen up to there.
        scans: u32,
    },
    /// A segment length field below 2.
    BadLength {
        /// Offset of the marker.
        at: usize,
    },
}

impl std::fmt::Display for MarkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoSoi => f.write_str("no SOI marker"),
            Self::Truncated { at, scans } => {
                write!(f, "image file is truncated (data ends at byte {at} before the EOI marker, after {scans} scans)")
            }
            Self::BadLength { at } => write!(f, "bogus marker length at byte {at}"),
        }
    }
}

/// JPEG marker codes (the byte after `0xFF`) the decode module's header walks name: one table for this walk,
/// `gpu_eligible`'s and the tests'.
pub(super) mod code {
    pub const SOI: u8 = 0xD8;
    pub const EOI: u8 = 0xD9;
    pub const SOS: u8 = 0xDA;
    pub const SOF0: u8 = 0xC0;
    pub const SOF1: u8 = 0xC1;
    pub const DHT: u8 = 0xC4;
    pub const DQT: u8 = 0xDB;
    pub const DRI: u8 = 0xDD;
    pub const APP0: u8 = 0xE0;
    pub const APP1: u8 = 0xE1;
    pub const APP14: u8 = 0xEE;
    pub const APP15: u8 = 0xEF;
    pub const COM: u8 = 0xFE;
}
use code::{DHT, DQT, EOI, SOF0, SOF1, SOI, SOS};

/// Walk the marker structure of `bytes` (a JPEG) up to its first EOI.
pub fn walk_jpeg(bytes: &[u8]) -> Result<JpegStructure, MarkerError> {
    if bytes.len() < 2 || bytes[0] != 0xFF || bytes[1] != SOI {
        return Err(MarkerError::NoSoi);
    }
    let n = bytes.len();
    let mut pos = 2usize;
    let mut scans = 0u32;
    let mut tables = Tables::default();
    loop {
        // Next marker: skip extraneous bytes up to an 0xFF, then fill bytes.
        pos = match find_ff(bytes, pos) {
            Some(p) => p,
            None => return Err(MarkerError::Truncated { at: n, scans }),
        };
        while pos < n && bytes[pos] == 0xFF {
            pos += 1;
        }
        if pos >= n {
            return Err(MarkerError::Truncated { at: n, scans });
        }
        let marker = bytes[pos];
        let marker_at = pos - 1;
        pos += 1;
        match marker {
            EOI => return Ok(JpegStructure { scans, end: pos, borrows_tables: tables.borrows }),
            // Standalone markers (and 0x00, which libjpeg reports as an error itself): no length. A second SOI is
            // an error to libjpeg.
            0x00 | 0x01 | 0xD0..=0xD7 => continue,
            SOI => {
                tables.borrows = true;
                continue;
            }
            _ => {}
        }
        if pos + 2 > n {
            return Err(MarkerError::Truncated { at: n, scans });
        }
        let len = usize::from(u16::from_be_bytes([bytes[pos], bytes[pos + 1]]));
        if len < 2 {
            return Err(MarkerError::BadLength { at: marker_at });
        }
        if len > n - pos {
            return Err(MarkerError::Truncated { at: n, scans });
        }
        tables.segment(marker, &bytes[pos + 2..pos + len]);
        pos += len;
        if marker == SOS {
            scans = scans.saturating_add(1);
            pos = match skip_entropy_data(bytes, pos) {
                Some(p) => p,
                None => return Err(MarkerError::Truncated { at: n, scans }),
            };
        }
    }
}

/// How a frame codes its scans (from its SOF marker), as far as table use goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Coding {
    /// No SOF seen yet.
    #[default]
    NoFrame,
    /// SOF0/SOF1: every scan uses the DC and AC Huffman table of each of its components.
    SequentialHuffman,
    /// SOF2: DC first scans the DC table, DC refinements none, AC scans the AC table.
    ProgressiveHuffman,
    /// SOF3: DC tables only, no quantization tables.
    LosslessHuffman,
    /// SOF9/SOF10: quantization tables only.
    Arithmetic,
    /// SOF11: no tables at all.
    LosslessArithmetic,
}

/// Which table slots this file has defined so far, and the frame's components (for the scans).
#[derive(Debug, Default)]
struct Tables {
    /// Bit `i`: quantization table `i` defined by a DQT of this file.
    quant: u8,
    /// Bits 0–3: DC Huffman tables 0–3; bits 4–7: AC tables 0–3 (defined by a DHT of this file).
    huffman: u8,
    coding: Coding,
    /// `(component id, quantization table)` of the frame's first four components (libjpeg matches scan
    /// components against these only).
    components: [(u8, u8); 4],
    /// How many of `components` are set.
    count: usize,
    /// See [`JpegStructure::borrows_tables`].
    borrows: bool,
}

impl Tables {
    /// One segment (`seg`: the bytes after its length field).
    fn segment(&mut self, marker: u8, seg: &[u8]) {
        match marker {
            DQT => self.dqt(seg),
            DHT => self.dht(seg),
            SOF0 | SOF1 => self.frame(Coding::SequentialHuffman, seg),
            0xC2 => self.frame(Coding::ProgressiveHuffman, seg),
            0xC3 => self.frame(Coding::LosslessHuffman, seg),
            0xC9 | 0xCA => self.frame(Coding::Arithmetic, seg),
            0xCB => self.frame(Coding::LosslessArithmetic, seg),
            SOS => self.scan(seg),
            // DAC, DRI, DNL, APPn, COM: no tables. Everything else (SOF5–7, JPG, SOF13–15, DHP, EXP, JPGn,
            // reserved codes) is a fatal error to libjpeg.
            0xCC | 0xDC | 0xDD | 0xE0..=0xEF | 0xFE => {}
            _ => self.borrows = true,
        }
    }

    /// `get_dqt`: tables of 64 one- or two-byte entries, index below 4, exactly filling the segment.
    fn dqt(&mut self, mut seg: &[u8]) {
        while let [pq_tq, rest @ ..] = seg {
            let size = if pq_tq >> 4 == 0 { 64 } else { 128 };
            let index = pq_tq & 15;
            if index > 3 || rest.len() < size {
                self.borrows = true;
                return;
            }
            self.quant |= 1 << index;
            seg = &rest[size..];
        }
    }

    /// `get_dht`: class/index byte (0x00–0x03 DC, 0x10–0x13 AC), 16 counts, at most 256 values, exactly
    /// filling the segment. An empty table is still a definition (libjpeg installs it).
    fn dht(&mut self, mut seg: &[u8]) {
        while !seg.is_empty() {
            let Some((&tc_th, rest)) = seg.split_first() else { return };
            let slot = match tc_th {
                0x00..=0x03 => tc_th,
                0x10..=0x13 => tc_th - 0x10 + 4,
                _ => {
                    self.borrows = true;
                    return;
                }
            };
            let total: usize = rest.iter().take(16).map(|&c| usize::from(c)).sum();
            if rest.len() < 16 || total > 256 || rest.len() - 16 < total {
                self.borrows = true;
                return;
            }
            self.huffman |= 1 << slot;
            seg = &rest[16 + total..];
        }
    }

    /// `get_sof`: one frame per file, `Nf` three-byte component specs exactly filling the segment.
    fn frame(&mut self, coding: Coding, seg: &[u8]) {
        let ok =
            self.coding == Coding::NoFrame && seg.len() >= 6 && seg[5] > 0 && seg.len() == 6 + 3 * usize::from(seg[5]);
        if !ok {
            self.borrows = true;
            return;
        }
        self.coding = coding;
        for (slot, c) in self.components.iter_mut().zip(seg[6..].chunks_exact(3)) {
            *slot = (c[0], c[2]);
            self.count += 1;
        }
    }

    /// `get_sos` + the entropy decoder's start of pass: every table the scan uses must be defined by now.
    fn scan(&mut self, seg: &[u8]) {
        let [ns, rest @ ..] = seg else {
            self.borrows = true;
            return;
        };
        let ns = usize::from(*ns);
        if self.coding == Coding::NoFrame || !(1..=4).contains(&ns) || rest.len() != 2 * ns + 3 {
            self.borrows = true;
            return;
        }
        let (selectors, spectral) = rest.split_at(2 * ns);
        let (ss, ah) = (spectral[0], spectral[2] >> 4);
        let mut seen = 0u8;
        for s in selectors.chunks_exact(2) {
            let Some(ci) = self.components[..self.count].iter().position(|&(id, _)| id == s[0]) else {
                self.borrows = true; // libjpeg: "Invalid component ID"
                return;
            };
            if seen & (1 << ci) != 0 {
                self.borrows = true; // the same component twice in one scan
                return;
            }
            seen |= 1 << ci;
            let (dc, ac) = (s[1] >> 4, s[1] & 15);
            let quant = self.components[ci].1;
            let (need_quant, need_dc, need_ac) = match self.coding {
                Coding::SequentialHuffman => (true, true, true),
                Coding::ProgressiveHuffman => (true, ss == 0 && ah == 0, ss != 0),
                Coding::LosslessHuffman => (false, true, false),
                Coding::Arithmetic => (true, false, false),
                Coding::LosslessArithmetic | Coding::NoFrame => (false, false, false),
            };
            let defined = |mask: u8, index: u8| index < 4 && mask & (1 << index) != 0;
            if (need_quant && !defined(self.quant, quant))
                || (need_dc && !defined(self.huffman, dc))
                || (need_ac && !defined(self.huffman >> 4, ac))
            {
                self.borrows = true;
            }
        }
    }
}

/// Whether libjpeg's header read of `bytes` reaches an EOI before any SOS: a "tables-only" (abbreviated table
/// specification) datastream, or a header that runs out of data (libjpeg's memory source then inserts an EOI).
/// `tj3DecompressHeader` then loads the tables into the handle and returns *success with the previous image's
/// header values* — it skips setting them, and skips its warning check too — where a fresh handle has -1. The
/// walk follows libjpeg's `read_markers`/`next_marker`: bytes up to the next `0xFF` are skipped (libjpeg warns),
/// fill bytes too, standalone markers carry no length, APPn/COM/DNL with a length below 2 skip only their
/// length field. A marker libjpeg refuses (reserved codes, SOF5–7/13–15, JPG, a second SOI) or a length below 2
/// on a table/frame segment ends the walk with `false`: libjpeg fails there with its own error. Header segments
/// only (no entropy data), so it costs a few ns per segment.
pub fn ends_before_scan(bytes: &[u8]) -> bool {
    if bytes.len() < 2 || bytes[0] != 0xFF || bytes[1] != SOI {
        return false;
    }
    let n = bytes.len();
    let mut pos = 2usize;
    loop {
        let Some(p) = find_ff(bytes, pos) else { return true };
        pos = p;
        while pos < n && bytes[pos] == 0xFF {
            pos += 1;
        }
        let Some(&marker) = bytes.get(pos) else { return true };
        pos += 1;
        match marker {
            EOI => return true,
            SOS => return false,
            // FF 00 is skipped as data by `next_marker`; RSTn and TEM are parameterless.
            0x00 | 0x01 | 0xD0..=0xD7 => continue,
            // APPn, COM, DNL: `skip_variable` / `get_interesting_appn` skip nothing more for a length below 2.
            0xE0..=0xEF | 0xFE | 0xDC => {}
            // Frame, table and restart segments: their parsers reject a length below 2.
            0xC0..=0xC4 | 0xC9..=0xCC | 0xDB | 0xDD => {}
            // Everything else is a fatal error to libjpeg (SOI twice, SOF5–7/13–15, JPG, DHP, EXP, JPGn, reserved).
            _ => return false,
        }
        let Some(len) = bytes.get(pos..pos + 2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))) else {
            return true;
        };
        pos += match marker {
            0xE0..=0xEF | 0xFE | 0xDC => len.max(2),
            _ if len < 2 => return false,
            _ => len,
        };
    }
}

/// From the start of entropy-coded data, the offset of the `0xFF` that begins the next real marker (not stuffing,
/// not RSTn, not fill); `None` if the data ends first.
fn skip_entropy_data(bytes: &[u8], mut pos: usize) -> Option<usize> {
    let n = bytes.len();
    loop {
        pos = find_ff(bytes, pos)?;
        // Skip fill bytes: FF FF … FF xx is one marker (or stuffing) introduced by the last FF.
        let mut q = pos + 1;
        while q < n && bytes[q] == 0xFF {
            q += 1;
        }
        if q >= n {
            return None;
        }
        match bytes[q] {
            0x00 | 0xD0..=0xD7 => pos = q + 1,
            _ => return Some(q - 1),
        }
    }
}

/// Offset of the first `0xFF` at or after `pos`. Eight bytes per step: a byte of `x` is 0xFF iff that byte of
/// `!x` is zero, found with the classic has-zero-byte test.
#[inline]
fn find_ff(bytes: &[u8], mut pos: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let n = bytes.len();
    while pos + 8 <= n {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[pos..pos + 8]);
        let v = !u64::from_le_bytes(w);
        let z = v.wrapping_sub(LO) & !v & HI;
        if z != 0 {
            // The lowest flagged byte is exact (borrows only propagate upwards from a true zero byte).
            return Some(pos + (z.trailing_zeros() / 8) as usize);
        }
        pos += 8;
    }
    while pos < n {
        if bytes[pos] == 0xFF {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_ff_agrees_with_a_plain_search() {
        let mut v = vec![0u8; 64];
        for i in 0..64 {
            for j in 0..64 {
                v.iter_mut().for_each(|b| *b = 0xFE);
                v[i] = 0xFF;
                if j > i {
                    v[j] = 0xFF;
                }
                for start in [0, i.saturating_sub(3), i] {
                    assert_eq!(find_ff(&v, start), v[start..].iter().position(|&b| b == 0xFF).map(|p| p + start));
                }
            }
        }
        assert_eq!(find_ff(&[0x7F; 20], 0), None);
    }

    #[test]
    fn minimal_streams() {
        // SOI, SOS (len 2), entropy data with stuffing and RST, EOI.
        let ok = [0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02, 0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD3, 0x56, 0xFF, 0xFF, 0xD9];
        assert_eq!(walk_jpeg(&ok), Ok(JpegStructure { scans: 1, end: ok.len(), borrows_tables: true }));
        for cut in 0..ok.len() {
            let r = walk_jpeg(&ok[..cut]);
            assert!(matches!(r, Err(MarkerError::Truncated { .. }) | Err(MarkerError::NoSoi)), "{cut}: {r:?}");
        }
        assert_eq!(walk_jpeg(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01]), Err(MarkerError::BadLength { at: 2 }));
        // An EOI inside an APP1 payload (EXIF thumbnail) is not the image's EOI.
        let thumb = [0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x06, 0xFF, 0xD8, 0xFF, 0xD9, 0xFF, 0xDA, 0x00, 0x02, 0x01];
        assert_eq!(walk_jpeg(&thumb), Err(MarkerError::Truncated { at: thumb.len(), scans: 1 }));
    }
}
