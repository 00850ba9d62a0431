//! source/formats — the record formats by name (`trdata.Parquet` → "parquet", …): the one table the binding opens
//! them by, and the opening of a record source (its paths checked and expanded, its format's opener, the store).
//! A new record format is its own file behind `records::RecordFormat` plus its line in [`OPENERS`].

use super::packed::PartialOptions;
use super::records::{Columns, Opener, PATHS, RecordFiles};
use crate::error::{Result, TrdataError};
use std::path::PathBuf;

/// The record formats by kind name.
const OPENERS: &[(&str, Opener)] = &[
    ("parquet", super::parquet::open),
    ("mds", super::mds::open),
    ("litdata", super::litdata::open),
    ("tfrecord", super::tfrecord::open),
];

/// The opener of the format named `kind`; None for a name that is not one.
pub fn opener(kind: &str) -> Option<Opener> {
    OPENERS.iter().find(|(k, _)| *k == kind).map(|(_, o)| *o)
}

/// The store of the format `kind` over `paths` (the user's `paths`: local paths, or URLs read with `storage`,
/// all of one kind; `hf://` and bucket globs expanded here: storage/locations.rs `expand_patterns`), reading
/// `columns`, its units cached with `partial`'s parameters.
pub fn open(
    kind: &str,
    paths: &[PathBuf],
    storage: &crate::storage::StorageOptions,
    columns: &Columns,
    partial: PartialOptions,
) -> Result<RecordFiles> {
    let open = opener(kind).ok_or_else(|| TrdataError::config("kind", format!("{kind:?} is not a record format")))?;
    crate::storage::locations::check_locations(PATHS, paths, storage, false)?;
    let locations = paths.iter().map(|p| crate::storage::Location::parse(PATHS, p)).collect::<Result<Vec<_>>>()?;
    let files = crate::storage::locations::expand_patterns(PATHS, &locations, storage)?;
    let (catalogue, format) = open(&files, storage, columns)?;
    RecordFiles::new(format, catalogue, partial)
}
