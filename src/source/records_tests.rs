//! Test support of the record formats (tfrecord.rs, mds.rs, litdata.rs): open a source through its opener, read
//! every sample through `records::record_dataset` and `Dataset::read` as the loader does, and copy fixtures.

use super::packed::PartialOptions;
use super::records::{Columns, Opener, RecordFiles, Value, record_dataset};
use super::{Dataset, ImageStore, PixelShape, ReadCtx};
use crate::error::{ImageError, Result};
use crate::storage::{Location, StorageOptions};
use std::path::{Path, PathBuf};

/// One sample as read: its name, then its bytes, pixel shape (raw pixels), label and extras, or its error.
pub type Read = (String, std::result::Result<(Vec<u8>, Option<PixelShape>, i64, Vec<Value>), ImageError>);

/// The committed fixtures of `tests/data/formats/<sub>`.
pub fn fixture(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/formats").join(sub)
}

/// A fixture image's bytes.
pub fn image(name: &str) -> Vec<u8> {
    std::fs::read(fixture("images").join(name)).unwrap()
}

/// `from` copied (its files, not below) into a fresh folder named `name`.
pub fn copy_dir(from: &Path, name: &str) -> PathBuf {
    let d = crate::test_data::fresh_dir(name);
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_file() {
            std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
        }
    }
    d
}

/// Open `paths` with `open` and `columns`, as a dataset.
pub fn open_with(open: Opener, paths: &[&Path], columns: &Columns) -> Result<Dataset> {
    let locations: Vec<Location> = paths.iter().map(|p| Location::local(*p)).collect();
    let (catalogue, format) = open(&locations, &StorageOptions::default(), columns)?;
    record_dataset(format, catalogue, PartialOptions::default())
}

/// Every sample of `ds`, in order (module docs).
pub fn read_all(ds: &Dataset) -> Vec<Read> {
    let store = ds.store_as::<RecordFiles>().expect("a record store");
    let extras = store.extras();
    let how = ReadCtx { epoch: 0, max_bytes: 1 << 30, planned: false, stopping: &|| false };
    (0..ds.len())
        .map(|i| {
            let name = ds.sample_name(i).to_string_lossy().into_owned();
            let mut buf = Vec::new();
            let got = ds.read(i, &how, &mut buf).map(|s| (s.bytes(&buf).to_vec(), s.pixel_shape())).and_then(
                |(bytes, shape)| {
                    let label = store.read_label(i).expect("labels come with reads");
                    let values = match &extras {
                        None => Vec::new(),
                        Some(x) => x.read(i)?.values,
                    };
                    Ok((bytes, shape, label, values))
                },
            );
            (name, got)
        })
        .collect()
}

/// The file name part of a sample name `dir/file#n`.
pub fn short(name: &str) -> String {
    Path::new(name).file_name().unwrap().to_string_lossy().into_owned()
}

/// Apply a proptest's `edits` to a file's bytes: (position, byte, op) with op 0 replace, 1 insert, 2 truncate, 3
/// flip one bit (positions wrap around the length).
pub fn mutate(data: &mut Vec<u8>, edits: &[(usize, u8, u8)]) {
    for &(at, byte, op) in edits {
        let at = at % (data.len() + 1);
        match op {
            0 if at < data.len() => data[at] = byte,
            1 => data.insert(at, byte),
            2 => data.truncate(at),
            _ if at < data.len() => data[at] ^= 1 << (byte % 8),
            _ => {}
        }
    }
}
