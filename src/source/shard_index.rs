//! source/shard_index — what the MDS (mds.rs) and LitData (litdata.rs) readers share: a dataset's `index.json`
//! found and read (size-capped, parsed by packed_json.rs's tree over the core's JSON lexer: integers, strings,
//! nesting at most 16 deep), a shard's relative name checked and placed beside it, a shard's offset table
//! checked, and the `pil` cell (`u32 width, u32 height, u32 mode length, mode, raw pixels`) both write.

use super::PixelShape;
use super::packed_json::{self, Json};
use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use crate::storage::{Location, ObjectReader, StorageOptions};
use std::path::Path;

/// Largest `index.json` read.
pub const MAX_INDEX_BYTES: u64 = 64 << 20;
pub use super::records::{MESSAGE_BYTES, cut_message};
/// Longest side of a `pil` cell's image.
pub const MAX_SIDE: u32 = 65535;

/// The dataset root and its index: `first` is the folder (or URL prefix) holding `index.json`, or that file.
pub fn index_location(first: &Location) -> (Location, Location) {
    let named_index = first.name().file_name().is_some_and(|n| n == "index.json");
    match first {
        Location::Local(p) if named_index => {
            (first.clone(), Location::Local(p.parent().map_or_else(|| ".".into(), Path::to_path_buf)))
        }
        Location::Local(p) => (Location::Local(p.join("index.json")), first.clone()),
        Location::Url { scheme, url } => {
            let path = url.path();
            let dir = if named_index { path.rsplit_once('/').map_or("", |(d, _)| d) } else { path };
            let mut root = url.clone();
            root.set_path(dir.trim_end_matches('/'));
            let mut index = url.clone();
            index.set_path(&format!("{}/index.json", dir.trim_end_matches('/')));
            (Location::Url { scheme: *scheme, url: index }, Location::Url { scheme: *scheme, url: root })
        }
        Location::Hf(_) | Location::HfPattern(_) => {
            let text = first.name().to_string_lossy().trim_end_matches('/').to_string();
            let dir = if named_index { text.rsplit_once('/').map_or("", |(d, _)| d).to_string() } else { text };
            (hub_location(format!("{dir}/index.json")), hub_location(dir))
        }
    }
}

/// An `hf://` text as a location: a pattern naming one file (or folder, for a root), its grammar checked when it
/// is opened (a text the grammar refuses stays as it is and fails there, naming itself).
fn hub_location(text: String) -> Location {
    Location::parse("paths", Path::new(&text)).unwrap_or(Location::Local(text.into()))
}

/// `root`/`name` (name checked relative by [`check_name`]).
pub fn child(root: &Location, name: &str) -> Location {
    match root {
        Location::Local(p) => Location::Local(p.join(name)),
        Location::Url { scheme, url } => {
            let mut u = url.clone();
            u.set_path(&format!("{}/{name}", url.path().trim_end_matches('/')));
            Location::Url { scheme: *scheme, url: u }
        }
        Location::Hf(_) | Location::HfPattern(_) => {
            hub_location(format!("{}/{name}", root.name().to_string_lossy().trim_end_matches('/')))
        }
    }
}

/// A shard's name from an index: relative, `/`-separated, no empty, `.` or `..` part, no `\`, at most 1024
/// bytes; None when it is not one.
pub fn check_name(name: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(name).ok()?;
    let ok = !s.is_empty()
        && s.len() <= 1024
        && !s.contains('\\')
        && !s.contains('\0')
        && s.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    ok.then_some(s)
}

/// The index at `location`, opened, its size checked, parsed: (the reader, the JSON tree).
pub fn read_index(location: &Location, storage: &StorageOptions) -> Result<(ObjectReader, Json)> {
    let reader = ObjectReader::open(location, storage)?;
    if reader.size() > MAX_INDEX_BYTES {
        return Err(reader.source_error(format!("{} bytes: an index.json is at most {MAX_INDEX_BYTES}", reader.size())));
    }
    let text = reader.read_growing(0, reader.size()).map_err(|e| reader.source_error(e.message))?;
    let json = packed_json::parse(&text).map_err(|m| reader.source_error(m.replace("metadata JSON", "index.json")))?;
    Ok((reader, json))
}

/// Typed reads of an index's JSON, each error a `SourceError` of the index naming `at` (where in the index).
pub struct Fields<'a> {
    /// The index (for errors).
    pub index: &'a ObjectReader,
}

impl Fields<'_> {
    /// An error of the index at `at`.
    pub fn error(&self, at: &str, what: impl std::fmt::Display) -> TrdataError {
        self.index.source_error(format!("{at}: {what}"))
    }

    /// `v[key]`, which must be there.
    pub fn get<'j>(&self, v: &'j Json, key: &str, at: &str) -> Result<&'j Json> {
        v.get(key).ok_or_else(|| self.error(at, format!("has no {key:?}")))
    }

    /// An integer in `0..=max`.
    pub fn uint(&self, v: &Json, max: u64, at: &str) -> Result<u64> {
        match v {
            Json::Int(n) if (0..=i128::from(max)).contains(n) => Ok(*n as u64),
            other => Err(self.error(at, format!("{other:?} is not an integer from 0 to {max}"))),
        }
    }

    /// A string (UTF-8).
    pub fn str<'j>(&self, v: &'j Json, at: &str) -> Result<&'j str> {
        match v {
            Json::Str(s) => std::str::from_utf8(s).map_err(|_| self.error(at, "is not UTF-8 text")),
            other => Err(self.error(at, format!("{other:?} is not a string"))),
        }
    }

    /// A string or null.
    pub fn opt_str<'j>(&self, v: Option<&'j Json>, at: &str) -> Result<Option<&'j str>> {
        match v {
            None | Some(Json::Null) => Ok(None),
            Some(v) => self.str(v, at).map(Some),
        }
    }

    /// An array.
    pub fn array<'j>(&self, v: &'j Json, at: &str) -> Result<&'j [Json]> {
        match v {
            Json::Array(a) => Ok(a),
            other => Err(self.error(at, format!("{other:?} is not an array"))),
        }
    }
}

/// Check a shard's (or chunk's) offset table: `table` holds `u32 count` then `count + 1` u32 offsets from the
/// start of the shard of `len` bytes; `count` must be `samples`, the first offset at least `header` bytes (the
/// table's own end), the offsets non-decreasing, the last `len`. The offsets, or what is wrong.
pub fn check_table(table: &[u8], samples: u64, header: u64, len: u64) -> std::result::Result<Vec<u32>, String> {
    let word = |k: usize| table.get(4 * k..4 * k + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let count = word(0).ok_or("its offset table is cut short")?;
    if u64::from(count) != samples {
        return Err(format!("holds {count} samples where the index says {samples}"));
    }
    let n = usize::try_from(samples).map_err(|_| "too many samples")?;
    let mut offsets = Vec::new();
    offsets.try_reserve_exact(n + 1).map_err(|_| "too many samples")?;
    for k in 0..=n {
        let o = word(1 + k).ok_or("its offset table is cut short")?;
        let before = offsets.last().copied().unwrap_or(0);
        if k == 0 && u64::from(o) < header {
            return Err(format!("its first sample starts at byte {o}, inside its {header}-byte header"));
        }
        if o < before {
            return Err(format!("sample {k} starts at byte {o}, before the one before it ({before})"));
        }
        offsets.push(o);
    }
    let last = u64::from(offsets[n]);
    if last != len {
        return Err(format!("its samples end at byte {last} where it has {len} bytes"));
    }
    Ok(offsets)
}

/// A `pil` cell: the raw pixels and their shape; modes L (1 channel) and RGB (3) only (`Unsupported` otherwise),
/// sides at most [`MAX_SIDE`], `width × height × channels` equal to the raw bytes (`Corrupt` otherwise).
pub fn pil(cell: &[u8]) -> std::result::Result<(&[u8], PixelShape), ImageError> {
    let corrupt = |m: String| ImageError::new(ImageErrorKind::Corrupt, m);
    let word = |k: usize| cell.get(4 * k..4 * k + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let (Some(w), Some(h), Some(mode_len)) = (word(0), word(1), word(2)) else {
        return Err(corrupt(format!("a pil cell of {} bytes has no header", cell.len())));
    };
    let rest = &cell[12..];
    let Some((mode, raw)) = rest.split_at_checked(mode_len as usize) else {
        return Err(corrupt(format!("a pil cell's mode of {mode_len} bytes runs past its {} bytes", cell.len())));
    };
    let channels: u8 = match mode {
        b"L" => 1,
        b"RGB" => 3,
        m => {
            return Err(ImageError::new(
                ImageErrorKind::Unsupported,
                format!("a pil image of mode {:?} (L and RGB are read)", String::from_utf8_lossy(m)),
            ));
        }
    };
    if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE {
        return Err(corrupt(format!("a pil image of {w}×{h} (sides 1 to {MAX_SIDE})")));
    }
    let want = u64::from(w) * u64::from(h) * u64::from(channels);
    if want != raw.len() as u64 {
        return Err(corrupt(format!("a pil image of {w}×{h}×{channels} with {} bytes of pixels", raw.len())));
    }
    Ok((raw, (h, w, channels)))
}
