//! Error types of the core. The Python binding (src/py/errors.rs) maps each variant to one class of the
//! `TrdataError` hierarchy, so every failure reaches the user typed and naming the file or parameter.

use std::fmt;
use std::path::PathBuf;

/// What went wrong with one image's bytes. Produced by `decode`/`augment`; the worker adds path and index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageErrorKind {
    /// 0-byte file.
    Empty,
    /// Neither JPEG nor PNG magic bytes.
    UnknownFormat,
    /// The file is a JPEG/PNG but the decoder failed (truncated, corrupt entropy data, bad markers).
    Corrupt,
    /// A valid file of a variant we do not decode (e.g. 16-bit lossless JPEG).
    Unsupported,
    /// Width × height above the configured pixel limit (decompression-bomb guard).
    TooLarge,
    /// The file could not be read (missing, permission, I/O error).
    Io,
    /// The dataset's own code failed on this sample (a Python source's `__getitem__` raised, or returned
    /// something that is not an image); the message carries its traceback.
    Dataset,
    /// The sample's targets do not fit its image or cannot be made: the size its annotations declare is not
    /// the decoded image's (COCO/YOLO/segmentation sizes read when the source was made), or its label map or
    /// packed annotations cannot be read.
    Target,
}

/// An image-level failure, without knowledge of which sample it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    /// Category, used for the skip policy and statistics.
    pub kind: ImageErrorKind,
    /// Human-readable detail (libjpeg-turbo's message, PNG decoder message, sizes).
    pub message: String,
}

impl ImageError {
    /// Build an error of `kind` with a message.
    pub fn new(kind: ImageErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ImageError {}

/// A sample that failed: the image error plus where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleError {
    /// The file that failed.
    pub path: PathBuf,
    /// Dataset index of the sample.
    pub index: u64,
    /// What failed.
    pub error: ImageError,
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.error.kind {
            ImageErrorKind::Dataset => "read",
            ImageErrorKind::Target => "make the targets of",
            _ => "decode",
        };
        write!(f, "cannot {what} sample {} ({}): {}", self.index, self.path.display(), self.error)
    }
}

/// Every error the core reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrdataError {
    /// A configuration value is invalid; names the parameter.
    Config { parameter: String, message: String },
    /// A sample could not be decoded and the policy is `raise` (or skipping ran out of replacements).
    Decode(SampleError),
    /// A source could not be built (missing root, empty folder, unreadable directory).
    Source { path: PathBuf, message: String },
    /// A worker thread panicked or could not start.
    Worker(String),
    /// A CUDA driver call failed or CUDA is unavailable; names the call.
    Cuda { call: String, message: String },
    /// The loader was closed, or used from a forked child.
    Closed(String),
    /// An allocation failed (`what` names the buffer, `bytes` its size): the system is out of memory, or the
    /// configuration asks for more than it has.
    Memory { what: String, bytes: u64 },
}

impl TrdataError {
    /// Shorthand for a configuration error on `parameter`.
    pub fn config(parameter: &str, message: impl Into<String>) -> Self {
        Self::Config { parameter: parameter.to_string(), message: message.into() }
    }
}

impl fmt::Display for TrdataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config { parameter, message } => write!(f, "invalid {parameter}: {message}"),
            Self::Decode(e) => e.fmt(f),
            Self::Source { path, message } => write!(f, "{}: {message}", path.display()),
            Self::Worker(m) => write!(f, "worker failed: {m}"),
            Self::Cuda { call, message } => write!(f, "CUDA {call} failed: {message}"),
            Self::Closed(m) => f.write_str(m),
            Self::Memory { what, bytes } => {
                write!(f, "cannot allocate {bytes} bytes ({:.2} GiB) for {what}", *bytes as f64 / GIB)
            }
        }
    }
}

impl std::error::Error for TrdataError {}

const GIB: f64 = (1u64 << 30) as f64;

/// Result alias of the core.
pub type Result<T, E = TrdataError> = std::result::Result<T, E>;
