//! The bytes of one sample: the first stage of a worker's per-sample work (source → **read** → decode).
//!
//! Only regular files are read, and never more than a limit. The failures this prevents:
//! - a FIFO in a file list: a blocking `open` waits for a writer forever, with the worker (and Ctrl-C) stuck;
//! - `/dev/zero`, `/dev/urandom`: metadata length 0, so a length guard passes and `read_to_end` runs until
//!   memory is gone;
//! - a file that grows while it is read: the length checked before reading no longer bounds the read.
//!
//! Protocol: `open(O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)` returns at once for every file type (a FIFO
//! without writer included), then `fstat` *of the opened descriptor* decides (no race with a rename between a
//! `stat` and the `open`): anything but a regular file is an `Io` error that says what it is. Then the length
//! guard, then a read of at most `limit + 1` bytes: reading `limit + 1` bytes means the file grew past the
//! limit, an error too. `O_NONBLOCK` has no effect on regular files of local or network file systems.
//!
//! The bytes of formats trdata does not decode (AVIF, HEIF, JPEG XL, JPEG 2000) are recognised here, so the error
//! says "AVIF is not decoded yet" instead of "not a JPEG, PNG, …": the user learns at the file what is missing.

use crate::error::{ImageError, ImageErrorKind};
use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A reused read buffer larger than this is given back when the next file needs less than a quarter of it.
const KEEP_BUFFER_BYTES: usize = 64 << 20;

pub use crate::storage::local::describe;

fn not_regular(ft: FileType) -> ImageError {
    ImageError::new(
        ImageErrorKind::Io,
        format!("is {}, not a regular file (only regular files are read)", describe(ft)),
    )
}

fn io_error(e: &std::io::Error) -> ImageError {
    ImageError::new(ImageErrorKind::Io, e.to_string())
}

/// Open `path` for reading without blocking on FIFOs and without acquiring a controlling terminal.
fn open_nonblocking(path: &Path) -> Result<File, ImageError> {
    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC).open(path).map_err(
        |e| {
            // A socket cannot be opened (ENXIO); name what it is rather than "No such device or address".
            match std::fs::metadata(path) {
                Ok(m) if !m.file_type().is_file() => not_regular(m.file_type()),
                _ => io_error(&e),
            }
        },
    )
}

/// Open `path` for reading as every file here is opened (the protocol in the module docs): without blocking on a
/// FIFO, and kept only when the opened descriptor is a regular file (else an `Io` error saying what it is). The
/// one open of [`read_regular`] and [`read_span`], and of the files Python reads itself (`_core.open_regular`:
/// YOLO label files, image headers, label maps).
pub fn open_regular(path: &Path) -> Result<(File, std::fs::Metadata), ImageError> {
    let file = open_nonblocking(path)?;
    let meta = file.metadata().map_err(|e| io_error(&e))?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    Ok((file, meta))
}

/// Read `len` bytes at `offset` of the regular file `path` into `buf` (cleared first): one member of a shard.
/// The span must lie inside the file as it is now (a shard truncated after its index was built is `Corrupt`,
/// never a short read), and `len` must not exceed `limit_bytes`.
pub fn read_span(path: &Path, offset: u64, len: u64, limit_bytes: u64, buf: &mut Vec<u8>) -> Result<(), ImageError> {
    use std::os::unix::fs::FileExt;
    if len > limit_bytes {
        return Err(ImageError::new(
            ImageErrorKind::TooLarge,
            format!("member of {len} bytes exceeds the limit of {limit_bytes} bytes"),
        ));
    }
    let (file, meta) = open_regular(path)?;
    if offset.checked_add(len).is_none_or(|end| end > meta.len()) {
        return Err(ImageError::new(
            ImageErrorKind::Corrupt,
            format!("member at byte {offset} (+{len}) lies past the end of the {}-byte file", meta.len()),
        ));
    }
    let want = usize::try_from(len).unwrap_or(usize::MAX);
    if buf.capacity() > KEEP_BUFFER_BYTES && buf.capacity() / 4 > want {
        *buf = Vec::new();
    }
    buf.clear();
    buf.try_reserve_exact(want).map_err(|_| {
        ImageError::new(ImageErrorKind::TooLarge, format!("cannot allocate {len} bytes to read the member"))
    })?;
    buf.resize(want, 0);
    file.read_exact_at(buf, offset).map_err(|e| io_error(&e))
}

/// Read the regular file `path` into `buf` (cleared first) as [`read_regular`] does, then refuse formats that
/// are recognised but not decoded yet (`Unsupported`, see [`undecoded_format`]).
pub fn read_sample(path: &Path, limit_bytes: u64, buf: &mut Vec<u8>) -> Result<(), ImageError> {
    read_regular(path, limit_bytes, buf)?;
    if let Some(name) = undecoded_format(buf) {
        return Err(ImageError::new(
            ImageErrorKind::Unsupported,
            format!(
                "{name} is not decoded yet (trdata decodes JPEG, PNG, WebP, GIF, TIFF, BMP and Netpbm); convert the file or leave it out"
            ),
        ));
    }
    Ok(())
}

/// Read the regular file `path` into `buf` (cleared first), refusing anything that is not a regular file and
/// any file larger than `limit_bytes` (checked before and while reading). Never blocks on a FIFO and never
/// reads more than `limit_bytes + 1` bytes.
pub fn read_regular(path: &Path, limit_bytes: u64, buf: &mut Vec<u8>) -> Result<(), ImageError> {
    let (mut file, meta) = open_regular(path)?;
    let too_large = |what: String| ImageError::new(ImageErrorKind::TooLarge, what);
    let len = meta.len();
    if len > limit_bytes {
        return Err(too_large(format!("file of {len} bytes exceeds the limit of {limit_bytes} bytes")));
    }
    let want = usize::try_from(len).unwrap_or(usize::MAX);
    if buf.capacity() > KEEP_BUFFER_BYTES && buf.capacity() / 4 > want {
        *buf = Vec::new(); // one huge file must not pin its buffer for the rest of the worker's life
    }
    buf.clear();
    buf.try_reserve_exact(want).map_err(|_| too_large(format!("cannot allocate {len} bytes to read the file")))?;
    let cap = limit_bytes.saturating_add(1);
    (&mut file).take(cap).read_to_end(buf).map_err(|e| io_error(&e))?;
    if buf.len() as u64 > limit_bytes {
        return Err(too_large(format!("file grew past the limit of {limit_bytes} bytes while it was read")));
    }
    Ok(())
}

/// The name of an image format that `bytes` start with and trdata's decoder does not handle (AVIF, HEIF, JPEG XL,
/// JPEG 2000), or `None` (every decoded format, or unknown bytes, left to the decoder's own diagnosis). Remove a
/// format from this list in the change that teaches `decode` to read it.
pub fn undecoded_format(bytes: &[u8]) -> Option<&'static str> {
    // ISO-BMFF: a box size, "ftyp", then the major brand.
    if bytes.len() >= 12 && &bytes[4..8] == b"ftyp" {
        return match &bytes[8..12] {
            b"avif" | b"avis" => Some("AVIF"),
            b"heic" | b"heix" | b"heim" | b"heis" | b"mif1" | b"msf1" => Some("HEIF"),
            _ => None,
        };
    }
    if bytes.starts_with(&[0xFF, 0x0A]) || bytes.starts_with(b"\0\0\0\x0cJXL \r\n\x87\n") {
        return Some("JPEG XL");
    }
    if bytes.starts_with(b"\0\0\0\x0cjP  \r\n\x87\n") || bytes.starts_with(&[0xFF, 0x4F, 0xFF, 0x51]) {
        return Some("JPEG 2000");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::mpsc;
    use std::time::Duration;

    fn tmpdir(name: &str) -> PathBuf {
        crate::test_data::fresh_dir(&format!("read-{name}"))
    }

    /// Run `f` on a thread and fail (instead of hanging the test binary) if it does not return promptly.
    fn within_5s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(5)).expect("read_sample blocked")
    }

    #[test]
    fn regular_file_is_read_whole() {
        let d = tmpdir("regular");
        let p = d.join("a.jpg");
        std::fs::write(&p, b"\xff\xd8\xffhello").unwrap();
        let mut buf = vec![1, 2, 3];
        read_sample(&p, 100, &mut buf).unwrap();
        assert_eq!(buf, b"\xff\xd8\xffhello");
        std::fs::write(&p, b"").unwrap();
        read_sample(&p, 100, &mut buf).unwrap();
        assert!(buf.is_empty());
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let d = tmpdir("fifo");
        let p = d.join("pipe.jpg");
        let st = std::process::Command::new("mkfifo").arg(&p).status().unwrap();
        assert!(st.success());
        let e = within_5s(move || read_sample(&p, 1 << 20, &mut Vec::new()).unwrap_err());
        assert_eq!(e.kind, ImageErrorKind::Io);
        assert!(e.message.contains("FIFO"), "{e}");
    }

    #[test]
    fn devices_and_directories_are_refused() {
        let e = within_5s(|| read_sample(Path::new("/dev/zero"), 1 << 20, &mut Vec::new()).unwrap_err());
        assert_eq!(e.kind, ImageErrorKind::Io);
        assert!(e.message.contains("character device"), "{e}");
        let d = tmpdir("dir");
        let e = read_sample(&d, 1 << 20, &mut Vec::new()).unwrap_err();
        assert!(e.message.contains("directory"), "{e}");
        let e = read_sample(&d.join("missing.jpg"), 1 << 20, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Io);
    }

    #[test]
    fn spans_are_read_exactly_and_never_past_the_end() {
        let dir = tmpdir("span");
        let p = dir.join("shard.tar");
        std::fs::write(&p, (0u8..100).collect::<Vec<_>>()).unwrap();
        let mut buf = vec![9; 3];
        read_span(&p, 10, 5, 1 << 20, &mut buf).unwrap();
        assert_eq!(buf, [10, 11, 12, 13, 14]);
        read_span(&p, 95, 5, 1 << 20, &mut buf).unwrap();
        assert_eq!(buf, [95, 96, 97, 98, 99]);
        for (offset, len) in [(96, 5), (u64::MAX, 2), (100, 1)] {
            let e = read_span(&p, offset, len, 1 << 20, &mut buf).unwrap_err();
            assert_eq!(e.kind, ImageErrorKind::Corrupt, "{offset}+{len}: {e}");
        }
        assert_eq!(read_span(&p, 0, 50, 10, &mut buf).unwrap_err().kind, ImageErrorKind::TooLarge);
        assert!(read_span(&dir, 0, 1, 10, &mut buf).is_err()); // a directory is no shard
    }

    #[test]
    fn limit_is_checked_before_and_during_the_read() {
        let d = tmpdir("limit");
        let p = d.join("big.jpg");
        std::fs::write(&p, vec![0u8; 101]).unwrap();
        let e = read_sample(&p, 100, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::TooLarge);
        let mut buf = Vec::with_capacity(KEEP_BUFFER_BYTES + 1);
        read_sample(&p, 101, &mut buf).unwrap();
        assert_eq!(buf.len(), 101);
        assert!(buf.capacity() < KEEP_BUFFER_BYTES, "an outlier's buffer was kept");
    }

    #[test]
    fn formats_not_decoded_yet_are_named() {
        let cases: [(&[u8], Option<&str>); 9] = [
            (b"\0\0\0\x1cftypavif\0\0\0\0", Some("AVIF")),
            (b"\0\0\0\x18ftypheic\0\0\0\0", Some("HEIF")),
            (b"\0\0\0\x18ftypisom\0\0\0\0", None),
            (b"\xff\x0a\xfa\x7f", Some("JPEG XL")),
            (b"\0\0\0\x0cjP  \r\n\x87\n\0\0", Some("JPEG 2000")),
            // Decoded formats are not refused here.
            (b"RIFF\x10\0\0\0WEBPVP8 ", None),
            (b"GIF89a\x01\0", None),
            (b"\xff\xd8\xff\xe0", None),
            (b"\x89PNG\r\n\x1a\n", None),
        ];
        for (bytes, want) in cases {
            assert_eq!(undecoded_format(bytes), want, "{bytes:?}");
        }
        let d = tmpdir("avif");
        let p = d.join("x.avif");
        std::fs::write(&p, b"\0\0\0\x1cftypavif\0\0\0\0mif1").unwrap();
        let e = read_sample(&p, 1 << 20, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Unsupported);
        assert!(e.message.starts_with("AVIF is not decoded yet"), "{e}");
    }
}
