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

const SOI: u8 = 0xD8;
const EOI: u8 = 0xD9;
const SOS: u8 = 0xDA;

/// Walk the marker structure of `bytes` (a JPEG) up to its first EOI.
pub fn walk_jpeg(bytes: &[u8]) -> Result<JpegStructure, MarkerError> {
    if bytes.len() < 2 || bytes[0] != 0xFF || bytes[1] != SOI {
        return Err(MarkerError::NoSoi);
    }
    let n = bytes.len();
    let mut pos = 2usize;
    let mut scans = 0u32;
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
            EOI => return Ok(JpegStructure { scans, end: pos }),
            // Standalone markers (and 0x00, which libjpeg reports as an error itself): no length.
            0x00 | 0x01 | 0xD0..=0xD7 | SOI => continue,
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
        assert_eq!(walk_jpeg(&ok), Ok(JpegStructure { scans: 1, end: ok.len() }));
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
