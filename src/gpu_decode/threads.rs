//! gpu_decode/threads — the decode threads of one engine: each takes its queue's tasks (queue.rs), places their
//! windows in the batch's device arena, decodes them in one nvJPEG call and finishes them for the transfer
//! thread; its decoder goes back to the pool (pool.rs) when it ends.

use super::pool::{IDLE, IdleKey};
use super::queue::DecodeQueue;
use super::task::GpuTask;
use crate::cuda::nvjpeg::{BatchDecoder, Roi};
use crate::cuda::{DeviceMemory, GpuContext};
use crate::stats::{GpuCounters, Stats};
use std::thread::JoinHandle;
use std::time::Instant;

/// Decode threads (each with its own nvJPEG hardware decoder) per queue: [without, with] interpolated upsampling.
/// On the H200 one decoder with interpolation is as fast as several, while a second decoder without it adds to the
/// rate; in the loader the choices between 1 and 3 plain decoders were within the runs' noise, and 2 plain
/// decoders keep a second call in flight while one blocks (the measurements: docs/design/gpu-decode-log.md).
pub const DECODERS: [usize; 2] = [2, 1];
/// Decode threads per engine (every [`DECODERS`] entry), which the default worker count leaves cores for.
pub const DECODE_THREADS: usize = DECODERS[0] + DECODERS[1];

/// The production queue: nvJPEG tasks, device arenas.
pub(super) type Core = DecodeQueue<GpuTask, ArenaMemory>;

/// A decode thread (module protocol): the tasks of queue `q` through its decoder `dec`; `tid` is its slot in
/// the `decoding` guard.
#[allow(clippy::too_many_arguments)]
pub(super) fn decode_main(
    core: &Core,
    ctx: &std::sync::Arc<GpuContext>,
    mut dec: BatchDecoder,
    q: usize,
    tid: usize,
    arenas: usize,
    arena_bytes: usize,
    counters: &GpuCounters,
) -> Option<BatchDecoder> {
    let mut healthy = true;
    while let Some((generation, tasks)) = core.take(q) {
        let t0 = Instant::now();
        let mut placed = core.place(&tasks, tid, generation, |memory: &mut ArenaMemory, a| {
            if memory.0.len() < arenas {
                memory.0.resize(arenas, None);
            }
            if memory.0[a].is_none() {
                // Allocated under the lock: once per arena for the loader's life.
                let m = DeviceMemory::alloc(ctx, arena_bytes)
                    .map_err(|e| format!("the GPU arena could not be allocated: {e}"))?;
                Stats::add(&counters.decode_gpu_arena_bytes, arena_bytes as u64);
                memory.0[a] = Some(std::sync::Arc::new(m));
            }
            Ok(memory.0[a].as_ref().map_or(0, |m| m.ptr() as usize))
        });
        let pick: Vec<usize> = (0..tasks.len()).filter(|&i| placed[i].is_ok()).collect();
        if !pick.is_empty() {
            let images: Vec<&[u8]> = pick.iter().map(|&i| tasks[i].bytes.as_slice()).collect();
            let rois: Vec<Roi> = pick.iter().map(|&i| tasks[i].roi).collect();
            let dst: Vec<(usize, usize)> = pick.iter().map(|&i| *placed[i].as_ref().expect("picked")).collect();
            // A panic inside nvJPEG's wrapper must not leave the batch's tasks without outcomes (the transfer thread
            // would wait for them forever): it stops the decoder like a failed synchronize.
            let decoded =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dec.decode_into(&images, &rois, &dst)))
                    .unwrap_or_else(|_| {
                        Err(crate::cuda::cuda_error("nvjpegDecodeBatchedEx", "the decode call panicked"))
                    });
            match decoded {
                Ok(outcomes) => {
                    for (&i, o) in pick.iter().zip(outcomes) {
                        if let Err(why) = o {
                            placed[i] = Err(why);
                        }
                    }
                }
                Err(e) => {
                    // The stream could not be synchronized: the device state is unknown; stop using it (and never
                    // keep it for another loader).
                    healthy = false;
                    let why = format!("the GPU decoder stopped: {e}");
                    core.fail(why.clone());
                    for &i in &pick {
                        placed[i] = Err(why.clone());
                    }
                }
            }
        }
        Stats::add_since(&counters.decode_gpu_ns, t0);
        // Outcomes of a generation an epoch restart dropped are not pushed (nor counted).
        if let Some((decoded, fallbacks)) = core.finish(tid, generation, tasks, placed) {
            Stats::add(&counters.decode_gpu, decoded);
            Stats::add(&counters.decode_gpu_fallback, fallbacks);
        }
    }
    healthy.then_some(dec)
}

/// A decode thread and where its decoder goes when it ends.
pub(super) struct DecodeThread {
    /// The pool's key for its decoder.
    pub(super) key: IdleKey,
    /// Device bytes the decoder took when it was made (carried with it into the pool).
    pub(super) bytes: u64,
    pub(super) thread: JoinHandle<Option<BatchDecoder>>,
}

impl DecodeThread {
    /// Wait for the thread; its decoder goes to the pool unless it stopped on an error (then it was destroyed on
    /// the thread) or the thread panicked (destroyed while unwinding).
    pub(super) fn join(self) {
        if let Ok(Some(dec)) = self.thread.join() {
            IDLE.put(self.key, dec, self.bytes);
        }
    }
}

/// Device memory of the arenas, shared by the decode threads (allocated on first use, kept for the loader's
/// life; freed when the last thread ends).
#[derive(Default)]
pub(super) struct ArenaMemory(Vec<Option<std::sync::Arc<DeviceMemory>>>);

impl std::fmt::Debug for ArenaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArenaMemory({} allocated)", self.0.iter().flatten().count())
    }
}

/// Bytes of one decode arena for batches of `batch_size`: 768 KiB of decoded window per row (a whole 512×500 RGB
/// image; ImageNet's RandomResizedCrop windows average less than half of that), within [64 MiB, 2 GiB]. There are
/// host ring depth + 1 arenas per GPU, allocated when first used; windows that do not fit go to the CPU path.
pub fn arena_bytes(batch_size: usize) -> usize {
    batch_size.saturating_mul(768 << 10).clamp(64 << 20, 2 << 30)
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn arenas_scale_with_the_batch_within_their_bounds() {
        assert_eq!(arena_bytes(1), 64 << 20);
        assert_eq!(arena_bytes(256), 256 * (768 << 10));
        assert_eq!(arena_bytes(1 << 20), 2 << 30);
    }
}
