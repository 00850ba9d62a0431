//! Test-only access to the real files of `../shared/data` (ImageNet sample, edge cases).

use std::path::PathBuf;

/// `<data>/<sub>` if it exists: `$TRDATA_TEST_DATA` (as in tests/conftest.py) or `../shared/data` beside the
/// checkout. None (with a note on stderr) when absent, so tests skip on machines without the data.
pub(crate) fn data_dir(sub: &str) -> Option<PathBuf> {
    let root = std::env::var_os("TRDATA_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("shared").join("data"));
    let d = root.join(sub);
    if d.is_dir() {
        Some(d)
    } else {
        eprintln!("NOTE: {} is absent; test skipped", d.display());
        None
    }
}
