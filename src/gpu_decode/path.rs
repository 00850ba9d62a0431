//! gpu_decode/path — [`GpuDecode`], one engine's GPU decode path: started with the engine's decoders and arenas
//! (threads.rs, pool.rs), asked by the workers to route and take samples (route.rs, queue.rs), and by the
//! transfer thread, through rows.rs, to reset, collect, release and adjust (queue.rs, controller.rs).

use super::controller::Controller;
use super::pool::{IDLE, decoder_bytes};
use super::queue::FILL;
use super::route::Share;
use super::task::{Decoded, GpuTask};
use super::threads::{Core, DECODERS, DecodeThread, decode_main};
use crate::cuda::GpuContext;
use crate::cuda::nvjpeg::{BatchDecoder, Nvjpeg};
use crate::error::{Result, TrdataError};
use crate::stats::{GpuCounters, Stats};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering, lock};
use std::time::Duration;

/// One engine's GPU decode path: the routing share, the decode thread and its arenas.
pub struct GpuDecode {
    core: Arc<Core>,
    /// Current GPU share as f64 bits (read by every worker per sample; written by the controller).
    share: AtomicU64,
    /// The auto controller (transfer thread only; None: a fixed share).
    controller: Mutex<Option<Controller>>,
    threads: Mutex<Vec<DecodeThread>>,
    counters: std::sync::Arc<GpuCounters>,
    arena_bytes: usize,
}

impl std::fmt::Debug for GpuDecode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDecode").field("share", &self.share()).finish_non_exhaustive()
    }
}

impl GpuDecode {
    /// Start the decode threads of `ctx`'s GPU: [`DECODERS`] hardware nvJPEG decoders (without and with
    /// interpolated upsampling; taken from the pool of closed loaders' decoders when it has them, else made) and
    /// `arenas` device arenas of `arena_bytes` each (allocated on first use). Errors when the GPU has no hardware
    /// JPEG engine or nvJPEG cannot be set up.
    pub fn start(
        nv: std::sync::Arc<Nvjpeg>,
        ctx: std::sync::Arc<GpuContext>,
        local_engine: usize,
        share: Share,
        arenas: usize,
        arena_bytes: usize,
        counters: std::sync::Arc<GpuCounters>,
    ) -> Result<Self> {
        // nvJPEG's hardware backend allocates internally (not through custom allocators), at handle creation and
        // `nvjpegDecodeBatchedPreAllocate` (64 windows up to 1024²): its device memory is measured as the drop in
        // free device memory while the decoders are made (other users of the GPU may blur it; it is reported as
        // such).
        let free_before = ctx.mem_info().map(|(free, _)| free).ok();
        let key = |q: usize| (ctx.ordinal(), q, nv.path.clone());
        // (queue, decoder, the device bytes it carries when it came from the pool; None: made now)
        let mut decoders: Vec<(usize, BatchDecoder, Option<u64>)> = Vec::new();
        let mut obtain = || -> Result<()> {
            for (q, &n) in DECODERS.iter().enumerate() {
                for _ in 0..n {
                    if let Some((dec, bytes)) = IDLE.take(&key(q)) {
                        decoders.push((q, dec, Some(bytes)));
                        continue;
                    }
                    let dec =
                        BatchDecoder::new(std::sync::Arc::clone(&nv), std::sync::Arc::clone(&ctx), true, q == 1, 0)?;
                    if dec.backend() != crate::cuda::nvjpeg::Backend::Hardware {
                        return Err(TrdataError::config(
                            "decode",
                            format!("needs a GPU with hardware JPEG engines; cuda:{} has none", ctx.ordinal()),
                        ));
                    }
                    decoders.push((q, dec, None));
                }
            }
            Ok(())
        };
        let obtained = obtain();
        let carried: Vec<Option<u64>> = decoders.iter().map(|d| d.2).collect();
        let made = carried.iter().filter(|c| c.is_none()).count();
        let made_bytes = match (made, free_before, ctx.mem_info()) {
            (1.., Some(before), Ok((after, _))) => before.saturating_sub(after) as u64,
            _ => 0,
        };
        let decoders: Vec<(usize, BatchDecoder, u64)> = decoders
            .into_iter()
            .zip(decoder_bytes(&carried, made_bytes))
            .map(|((q, dec, _), bytes)| (q, dec, bytes))
            .collect();
        if let Err(e) = obtained {
            // The decoders made or taken so far are healthy: keep them for the next loader.
            for (q, dec, bytes) in decoders {
                IDLE.put(key(q), dec, bytes);
            }
            return Err(e);
        }
        let nvjpeg_bytes: u64 = decoders.iter().map(|d| d.2).sum();
        let core = Arc::new(Core::new(DECODERS.len(), decoders.len(), arenas, arena_bytes, FILL));
        let (n, mut threads) = (decoders.len(), Vec::new());
        let mut pending = decoders.into_iter().enumerate();
        while let Some((tid, (q, dec, bytes))) = pending.next() {
            let (core2, c, ctx) = (Arc::clone(&core), std::sync::Arc::clone(&counters), std::sync::Arc::clone(&ctx));
            let spawned = std::thread::Builder::new()
                .name(format!("trdata-nvjpg{local_engine}{}{tid}", ["", "i"][q]))
                .spawn(move || decode_main(&core2, &ctx, dec, q, tid, arenas, arena_bytes, &c));
            match spawned {
                Ok(t) => threads.push(DecodeThread { key: key(q), bytes, thread: t }),
                Err(e) => {
                    // The decoders of the threads that started, and those not yet handed to one, are kept (the
                    // one inside the closure that could not start is destroyed with it).
                    core.shutdown();
                    for t in threads {
                        t.join();
                    }
                    for (_, (q, dec, bytes)) in pending {
                        IDLE.put(key(q), dec, bytes);
                    }
                    return Err(TrdataError::Worker(format!("cannot spawn a GPU decode thread: {e}")));
                }
            }
        }
        Stats::add(&counters.decode_gpu_nvjpeg_bytes, nvjpeg_bytes);
        Stats::add(&counters.decode_gpu_decoders, n as u64);
        Stats::add(&counters.decode_gpu_decoders_reused, (n - made) as u64);
        let (p, controller) = match share {
            Share::Fixed(p) => (p, None),
            Share::Auto(p) => (p, Some(Controller::new(p))),
        };
        let me = Self {
            core,
            share: AtomicU64::new(p.to_bits()),
            controller: Mutex::new(controller),
            threads: Mutex::new(threads),
            counters,
            arena_bytes,
        };
        me.publish_share(p);
        Ok(me)
    }

    /// The GPU share now.
    pub fn share(&self) -> f64 {
        f64::from_bits(self.share.load(Ordering::Relaxed))
    }

    fn publish_share(&self, p: f64) {
        self.share.store(p.to_bits(), Ordering::Relaxed);
        self.counters.decode_gpu_share_ppm.store((p * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// Whether sample (seed, epoch, index) goes to the GPU, given that its file is eligible: its own draw below
    /// the share (see the module docs).
    pub fn route(&self, seed: u64, epoch: u64, index: u64) -> bool {
        super::route::draw(self.share(), seed, epoch, index)
    }

    /// A sample whose file the GPU path cannot take went to the CPU workers (counted while the path is on).
    pub fn count_ineligible(&self) {
        Stats::add(&self.counters.decode_gpu_ineligible, 1);
    }

    /// Bytes of one arena (the bound on the decoded windows of one batch).
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Queue `task` (worker, before it completes the row; see the module protocol).
    pub fn submit(&self, task: GpuTask) {
        self.core.submit(task);
    }

    /// A new epoch: forget every task and result, empty the arenas (transfer thread; see the module protocol).
    pub fn reset(&self) {
        self.core.reset();
    }

    /// Wait until every task of batch `b` has an outcome and take them (empty when b has none). `aborted` is
    /// polled every 50 ms; `None` when it says so.
    pub fn wait_batch(&self, b: u64, aborted: impl Fn() -> bool) -> Option<Vec<Decoded>> {
        self.core.wait_batch(b, aborted)
    }

    /// Batch `b`'s decoded windows are no longer read (its kernels completed): free its arena.
    pub fn release(&self, b: u64) {
        self.core.release(b);
    }

    /// The auto controller, after one batch (see the module docs): `starved` = the consumer waited for it;
    /// `cpu_wait`/`gpu_wait` = how long the transfer thread waited for its CPU rows / GPU rows.
    pub fn adjust(&self, starved: bool, cpu_wait: Duration, gpu_wait: Duration) {
        let next = lock(&self.controller).as_mut().map(|c| c.next(starved, cpu_wait, gpu_wait));
        if let Some(p) = next {
            self.publish_share(p);
        }
    }

    /// Stop and join the decode threads (each finishes its current sub-batch first) and keep their decoders
    /// for the next loader ("Decoder reuse"); idempotent. Workers that still submit afterwards only queue
    /// (nothing waits for them: the transfer thread is stopped first).
    pub fn close(&self) {
        self.core.shutdown();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            t.join();
        }
    }
}

impl Drop for GpuDecode {
    fn drop(&mut self) {
        self.close();
    }
}
