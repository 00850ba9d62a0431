//! storage/local — a local file read by `pread`: opened once without blocking (a FIFO or a device is refused,
//! never waited on), then read at any offset from any thread. The size is the file's at open; a read checks the
//! file's size again (`fstat` of the open descriptor), so a file truncated since is `Corrupt`, never a short read.

use crate::error::{ImageError, ImageErrorKind, Result, TrdataError};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// An open regular file.
#[derive(Debug)]
pub(super) struct LocalObject {
    file: File,
    size: u64,
    /// Modification time at open, in nanoseconds since the epoch (0 when the file system has none): the
    /// file's version for the disk cache.
    mtime_ns: i128,
}

/// What a file type is, in words, for "… is a FIFO" messages (the one home; source/read.rs uses it too).
pub fn describe(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

impl LocalObject {
    /// Open `path` (a `SourceError` naming it when it cannot be opened or is not a regular file).
    pub(super) fn open(path: &Path) -> Result<Self> {
        let fail = |message: String| TrdataError::Source { path: path.to_path_buf(), message };
        let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot be opened: {e}")))?;
        if !meta.is_file() {
            return Err(fail(format!("is {}, not a regular file", describe(meta.file_type()))));
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| fail(format!("cannot be opened: {e}")))?;
        // The descriptor decides (a rename between the stat above and the open cannot slip a FIFO in).
        let meta = file.metadata().map_err(|e| fail(format!("cannot be opened: {e}")))?;
        if !meta.is_file() {
            return Err(fail(format!("is {}, not a regular file", describe(meta.file_type()))));
        }
        let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        Ok(Self { file, size: meta.len(), mtime_ns })
    }

    /// Size at open.
    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// Modification time at open (ns since the epoch).
    pub(super) fn mtime_ns(&self) -> i128 {
        self.mtime_ns
    }

    /// Fill `buf` from `offset` (inside the size at open: checked by the caller).
    pub(super) fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::result::Result<(), ImageError> {
        let io = |e: std::io::Error| ImageError::new(ImageErrorKind::Io, e.to_string());
        let now = self.file.metadata().map_err(io)?.len();
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > now) {
            return Err(ImageError::new(
                ImageErrorKind::Corrupt,
                format!("lies past the end of the file, {now} bytes now ({} when opened)", self.size),
            ));
        }
        self.file.read_exact_at(buf, offset).map_err(io)
    }
}
