//! gpu_decode/task — what a worker hands the GPU decode path for one sample ([`GpuTask`]: the file, its crop
//! window, the resample taps the CPU path's geometry computed), what the decode threads hand the transfer thread
//! back ([`Decoded`]), and the CPU path the transfer thread runs for a task the GPU could not decode
//! ([`CpuFallback`], implemented by the worker).

use crate::augment::GpuAxis;
use crate::cuda::nvjpeg::Roi;
use crate::cuda::resample_gpu::AxisTaps;
use crate::error::SampleError;
use crate::staging::RowWriter;

/// One axis' taps of a task (owned: the task crosses threads), as `SamplePipeline::prepare_gpu` computed them.
#[derive(Debug, Clone, Default)]
pub struct TaskTaps {
    /// First image pixel of each output's taps.
    pub start: Vec<u32>,
    /// Weights, `taps` per output.
    pub k: Vec<i32>,
    /// Taps per output.
    pub taps: u32,
    /// Union of the taps: `[win0, win1)`.
    pub win0: u32,
    /// End of the union.
    pub win1: u32,
}

impl From<GpuAxis<'_>> for TaskTaps {
    fn from(a: GpuAxis<'_>) -> Self {
        Self { start: a.start.to_vec(), k: a.k.to_vec(), taps: a.taps as u32, win0: a.win0, win1: a.win1 }
    }
}

impl TaskTaps {
    /// The kernel's view of them.
    pub fn view(&self) -> AxisTaps<'_> {
        AxisTaps { start: &self.start, k: &self.k, taps: self.taps, win0: self.win0, win1: self.win1 }
    }
}

/// One sample routed to the GPU: its file, its crop window and the taps that resample the window to the output.
#[derive(Debug)]
pub struct GpuTask {
    /// Batch and row of the sample.
    pub batch: u64,
    /// Row within the batch.
    pub row: usize,
    /// Dataset index (the CPU fallback decodes it again from the source).
    pub index: u64,
    /// The file.
    pub bytes: Vec<u8>,
    /// The window to decode, full scale, stored orientation.
    pub roi: Roi,
    /// Horizontal taps (starts in image pixels).
    pub x: TaskTaps,
    /// Vertical taps.
    pub y: TaskTaps,
    /// Pass order (as the CPU path would choose it).
    pub vertical_first: bool,
    /// Subsampled chroma: decode with interpolated upsampling (as libjpeg-turbo does).
    pub interpolate: bool,
}

/// A task's outcome: the decoded window in device memory (address, row pitch), or why the CPU must do it.
#[derive(Debug)]
pub struct Decoded<T = GpuTask> {
    /// The task.
    pub task: T,
    /// (device address, pitch) of the window, or the reason for the CPU fallback.
    pub at: Placed,
}

/// Where a task's window was placed: (device address, row pitch), or why the CPU must decode it.
pub type Placed = std::result::Result<(usize, usize), String>;

/// The CPU path for one sample, run by the transfer thread when the GPU could not decode it: the worker's own
/// `produce` (bytes, error and skip policy exactly as on the CPU path) into a one-row buffer.
pub trait CpuFallback: Send + Sync {
    /// Make dataset sample `index` into `dst` (and its label/index); `Ok(written index)` or the sample's error.
    fn produce(&self, index: u64, dst: &mut RowWriter<'_>) -> std::result::Result<u64, SampleError>;
    /// The label of dataset sample `index`.
    fn label(&self, index: u64) -> i64;
}
