//! `__dlpack__`'s keyword arguments → what to export, by the Python array-API / DLPack rules:
//! - `max_version`: None or major < 1 → legacy `DLManagedTensor` ("dltensor"); major ≥ 1 → versioned
//!   ("dltensor_versioned", version 1.0, which every 1.x consumer accepts);
//! - `dl_device`: must be the producer's own device (we never move data across devices) → BufferError;
//! - `copy`: True → a private host copy (flag IS_COPIED); False/None → zero-copy (we never need to copy);
//! - `stream`: decoded by [`ConsumerStream::parse`] for the device (invalid values → ValueError).

use super::ExportError;
use super::dlpack::Device;
use super::stream::ConsumerStream;

/// The arguments of one `__dlpack__` call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DlpackRequest {
    /// `stream`.
    pub stream: Option<i64>,
    /// `max_version` as (major, minor).
    pub max_version: Option<(i64, i64)>,
    /// `dl_device` as (device_type, device_id).
    pub dl_device: Option<(i32, i32)>,
    /// `copy`.
    pub copy: Option<bool>,
}

/// What to do for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportPlan {
    /// Versioned capsule ("dltensor_versioned") rather than legacy ("dltensor").
    pub versioned: bool,
    /// Export a private copy (`copy=True`).
    pub copy: bool,
    /// The consumer's stream, for the stream hook of device exports.
    pub stream: ConsumerStream,
}

impl DlpackRequest {
    /// Check the request against an export living on `device`.
    pub fn plan(&self, device: Device) -> Result<ExportPlan, ExportError> {
        let ours = device.dl();
        if let Some((device_type, device_id)) = self.dl_device
            && (device_type, device_id) != (ours.device_type, ours.device_id)
        {
            return Err(ExportError::Device { requested: (device_type, device_id), ours: device });
        }
        let stream = ConsumerStream::parse(device, self.stream)?;
        let copy = self.copy == Some(true);
        if copy && !device.host_accessible() {
            return Err(ExportError::CopyUnsupported(device));
        }
        Ok(ExportPlan { versioned: self.max_version.is_some_and(|(major, _)| major >= 1), copy, stream })
    }
}
