//! Test-only access to image data, in two tiers (as tests/conftest.py does for the Python tests):
//! - the real files of `../shared/data` (`$TRDATA_TEST_DATA` overrides the location) when present: the 1,000-image
//!   ImageNet sample and the 46 edge cases;
//! - otherwise a tier every clone has: `edge-cases` = the real files committed in `tests/fixtures/edge-cases` plus a
//!   generated stand-in for the one large file not committed (a 4032×3024 4:2:2 JPEG); `imagenet-sample` = 200
//!   photo-like JPEGs from the synthetic generator (`synthetic`, seed 7) in ImageFolder layout.
//!
//! Both fallbacks are built once per machine in the temp folder (into a private folder, then renamed into place, so
//! concurrent test processes never see half a tier).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::decode::Subsampling;
use crate::synthetic::encode::JpegEncoder;
use crate::synthetic::generate_synthetic_dataset;

/// A photo-like RGB test image, `w × h × 3` bytes: gradients plus deterministic noise (so JPEG entropy data and
/// every resample tap weight matter).
pub(crate) fn pattern(w: u32, h: u32, seed: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    for y in 0..h {
        for c in 0..w {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let n = x & 31;
            v.push(((c * 255 / w.max(1)) + n).min(255) as u8);
            v.push(((y * 255 / h.max(1)) + n / 2).min(255) as u8);
            v.push((((c + y) * 128 / (w + h).max(1)) + (x >> 27)).min(255) as u8);
        }
    }
    v
}

/// A fresh, empty folder `$TMPDIR/trdata-test-<name>-<pid>` for one test's files.
pub(crate) fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trdata-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Bumped when a fallback tier's content changes, so a stale copy in the temp folder is not reused.
const TIER_VERSION: u32 = 1;

/// `<data>/<sub>`: the shared real data when present, else the committed/generated tier (None only when that
/// cannot be built, with a note on stderr).
pub(crate) fn data_dir(sub: &str) -> Option<PathBuf> {
    let root = std::env::var_os("TRDATA_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("shared").join("data"));
    let d = root.join(sub);
    if d.is_dir() {
        return Some(d);
    }
    static EDGE: OnceLock<Option<PathBuf>> = OnceLock::new();
    static SAMPLE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let built = match sub {
        "edge-cases" => EDGE.get_or_init(|| build_once("edge-cases", build_edge_cases)),
        "imagenet-sample" => SAMPLE.get_or_init(|| build_once("synthetic-n200-s7", build_synthetic)),
        _ => &None,
    };
    if built.is_none() {
        eprintln!("NOTE: {} is absent and no fallback tier could be built; test skipped", d.display());
    }
    built.clone()
}

/// `$TMPDIR/trdata-test-tier-v<V>-<name>`, built by `build` into a private sibling and renamed into place; a
/// `<dir>.complete` file beside it (not inside: tests list the folder) marks it finished.
fn build_once(name: &str, build: fn(&Path) -> std::io::Result<()>) -> Option<PathBuf> {
    let dst = std::env::temp_dir().join(format!("trdata-test-tier-v{TIER_VERSION}-{name}"));
    let marker = dst.with_extension("complete");
    if marker.is_file() && dst.is_dir() {
        return Some(dst);
    }
    let tmp = std::env::temp_dir().join(format!("trdata-test-tier-v{TIER_VERSION}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = build(&tmp).and_then(|()| {
        let _ = std::fs::remove_dir_all(&dst); // an incomplete leftover
        std::fs::rename(&tmp, &dst)?;
        std::fs::write(&marker, b"")
    });
    match made {
        Ok(()) => Some(dst),
        // Another process renamed its copy into place first.
        Err(_) if marker.is_file() && dst.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Some(dst)
        }
        Err(e) => {
            eprintln!("NOTE: cannot build the {name} test tier in {}: {e}", dst.display());
            None
        }
    }
}

/// The committed real edge cases plus the 12 MP 4:2:2 stand-in.
fn build_edge_cases(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join("edge-cases");
    for e in std::fs::read_dir(&committed)? {
        let e = e?;
        std::fs::copy(e.path(), dir.join(e.file_name()))?;
    }
    let (w, h) = (4032u32, 3024u32);
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    for y in 0..h {
        for x in 0..w {
            let o = ((y * w + x) * 3) as usize;
            let grain = (x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503)) >> 27;
            rgb[o] = ((x / 16 + grain) % 256) as u8;
            rgb[o + 1] = ((y / 12 + grain) % 256) as u8;
            rgb[o + 2] = (((x + y) / 28) % 256) as u8;
        }
    }
    let jpeg = JpegEncoder::new()
        .and_then(|mut enc| enc.encode(&rgb, w, h, 90, Subsampling::S422))
        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    std::fs::write(dir.join("large_12mp_422__42_IndexError.jpg"), jpeg)
}

/// 200 synthetic photo-like JPEGs (10 classes) from seed 7 (the generator creates `dir`).
fn build_synthetic(dir: &Path) -> std::io::Result<()> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    generate_synthetic_dataset(dir, 200, 7, threads, &|_| true).map(|_| ())
}
