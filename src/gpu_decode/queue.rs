//! gpu_decode/queue — the decode queue between the workers (submit), the decode threads (take, place, finish)
//! and the transfer thread (wait, release, reset): the GPU decode path's one synchronization point.
//!
//! Protocol (one mutex, two condvars: `DecodeQueue`, generic over the task and the arenas' memory and free of
//! CUDA; [`GpuDecode`](super::GpuDecode) and `decode_main` (threads.rs) add nvJPEG and the device arenas):
//! - worker `submit(task)`: `batches[b].expected += 1`, push the task, wake the decode thread — *before* the worker
//!   completes the row at the station, so when the transfer thread has taken batch b every task of b is known.
//!   The worker writes the row's label and index; the row's pixels in the host slab stay unwritten.
//! - decode threads (each its own queue, by `GpuTask::interpolate`): take up to [`MAX_SUB_BATCH`] queued tasks
//!   (whatever is there: small batches when idle, full ones under load), place each window in the arena of its
//!   batch (`arena[b mod A]`, bump allocation under the mutex; a window that does not fit falls back to the CPU),
//!   decode them in one `nvjpegDecodeBatchedEx` and wait on the host for the decode (required: the hardware engines write before stream order, docs §0.6); then
//!   pushes each outcome into `batches[b].done` and wakes the transfer thread. A task of an older generation
//!   (epoch restarted meanwhile) is dropped.
//! - transfer thread, batch b (transfer/engine.rs, through gpu_decode/rows.rs): after the slab's H2D copy is enqueued on the copy stream,
//!   `wait_batch(b)` until `done.len() == expected`, then launches the resample kernels on the copy stream (so
//!   they follow the copy, which wrote garbage into the GPU rows, and the slot's release waits), runs the CPU
//!   fallback of every failed task on this thread (the worker's `produce` for the sample: same bytes, same error
//!   and skip policy as the CPU path) and copies its row, synchronizes, and only then `release(b)` frees b's
//!   arena: nothing reads it any more.
//! - arenas: A = host ring depth + 1. The station lets workers fill batches b..b+K while the transfer thread
//!   holds b (K = depth), so at most K + 1 consecutive batches have tasks, and b + A cannot start before b is
//!   released: `arena[b mod A]` is never shared by two live batches.
//! - epochs: `reset()` (transfer thread, after the station is rewound and before it acknowledges, so no worker
//!   and no kernel of the old epoch is running) bumps the generation, drops queued tasks and results and
//!   empties the arenas. The decode thread finishes its current sub-batch (into the old arenas: nobody reads them)
//!   before it sees the new generation.
//! - failure: a decode thread that cannot continue (nvJPEG error outside a batch) records why; every task from
//!   then on completes at once as a fallback, so the transfer thread never waits forever and the batch is made
//!   on the CPU. `close()` stops and joins the threads and keeps their decoders for the next loader on the GPU
//!   ([`IDLE`](super::pool::IDLE), pool.rs: "Decoder reuse"; a decoder that stopped on an error is destroyed instead).
//!
//! Checked by loom (`make test-loom`, the production `DecodeQueue` with a fake decoder: every task delivered once
//! to its batch, a reset during a decode, close during the waits) and by a stress test (8 workers, 3 decode
//! threads, epochs with random restarts, random decode failures and a lost decoder; `TRDATA_STRESS_SECS`).

use super::task::{Decoded, GpuTask, Placed};
use crate::sync::{Condvar, Mutex, lock};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Most tasks per nvJPEG batch (the engines' sweet spot is ≥ 7·k; larger batches add latency, not throughput).
pub const MAX_SUB_BATCH: usize = 64;
/// A decode thread that finds fewer tasks than this waits up to [`FILL_WAIT`] for more, unless the transfer
/// thread is waiting for a batch: each nvJPEG batch call has a fixed cost, so small calls waste the engines
/// (measured on the H200: 294 µs of thread time per image at a 0.25 share, whose calls were small, vs 134 µs with
/// full calls).
pub const FILL_TARGET: usize = 32;
/// See [`FILL_TARGET`].
pub const FILL_WAIT: Duration = Duration::from_millis(2);
/// Largest window (bytes, RGB) the GPU path decodes; larger ones go to the CPU path (which DCT-scales them).
pub const MAX_WINDOW_BYTES: usize = 64 << 20;

/// A task as the queue protocol ([`DecodeQueue`]) sees it.
pub(super) trait QueueTask {
    /// The batch of its row.
    fn batch(&self) -> u64;
    /// The queue (and so the decode threads) that takes it.
    fn queue(&self) -> usize;
    /// Width and height of its window (RGB: 3 bytes a pixel, rows unpadded).
    fn window(&self) -> (u32, u32);
}

impl QueueTask for GpuTask {
    fn batch(&self) -> u64 {
        self.batch
    }
    fn queue(&self) -> usize {
        usize::from(self.interpolate)
    }
    fn window(&self) -> (u32, u32) {
        (self.roi.w, self.roi.h)
    }
}

/// How a decode thread fills its calls: at most `max` tasks a call; with fewer than `target` queued it waits up
/// to `wait` for more, unless the transfer thread waits for results.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fill {
    pub(super) max: usize,
    pub(super) target: usize,
    pub(super) wait: Duration,
}

/// The production fill policy ([`MAX_SUB_BATCH`], [`FILL_TARGET`], [`FILL_WAIT`]).
pub(super) const FILL: Fill = Fill { max: MAX_SUB_BATCH, target: FILL_TARGET, wait: FILL_WAIT };

#[derive(Debug)]
struct BatchTasks<T> {
    expected: usize,
    done: Vec<Decoded<T>>,
}

impl<T> Default for BatchTasks<T> {
    fn default() -> Self {
        Self { expected: 0, done: Vec::new() }
    }
}

#[derive(Debug)]
struct State<T, M> {
    generation: u64,
    /// Queued tasks: in production [0] for the decoders without interpolated upsampling (4:4:4, gray), [1] with it.
    queue: Vec<VecDeque<T>>,
    batches: HashMap<u64, BatchTasks<T>>,
    /// Bytes used in each arena (index b mod A).
    arena_used: Vec<usize>,
    /// Why the decode threads stopped decoding (every task then falls back).
    failed: Option<String>,
    /// The transfer thread waits for a batch's results: decode threads start at once, however few tasks they hold.
    transfer_waiting: bool,
    /// The arenas' memory (device memory in production, nothing in the models), given to `place`'s allocator.
    memory: M,
    /// The generation each decode thread is decoding into the arenas now (None: not decoding). A thread of a
    /// newer generation places nothing while one of an older generation still decodes: `reset` emptied the
    /// arenas under it.
    decoding: Vec<Option<u64>>,
    shutdown: bool,
}

/// The decode queue's protocol (module docs: "Protocol"): one mutex, two condvars. Generic over the task `T` and
/// the arenas' memory `M` and free of CUDA, so loom model-checks exactly this code (`make test-loom`, tests
/// below); [`GpuDecode`](super::GpuDecode) and its decode threads (threads.rs) add nvJPEG and the device memory.
#[derive(Debug)]
pub(super) struct DecodeQueue<T, M> {
    state: Mutex<State<T, M>>,
    /// Wakes the decode threads (tasks queued, transfer thread waiting, shutdown).
    tasks: Condvar,
    /// Wakes the transfer thread (results pushed) and decode threads waiting in `place` for an older generation.
    results: Condvar,
    arena_bytes: usize,
    fill: Fill,
}

impl<T: QueueTask, M: Default> DecodeQueue<T, M> {
    /// `queues` task queues, `threads` decode threads (slots in the `decoding` guard), `arenas` arenas of
    /// `arena_bytes`.
    pub(super) fn new(queues: usize, threads: usize, arenas: usize, arena_bytes: usize, fill: Fill) -> Self {
        Self {
            state: Mutex::new(State {
                generation: 0,
                queue: (0..queues).map(|_| VecDeque::new()).collect(),
                batches: HashMap::new(),
                arena_used: vec![0; arenas],
                failed: None,
                transfer_waiting: false,
                memory: M::default(),
                decoding: vec![None; threads],
                shutdown: false,
            }),
            tasks: Condvar::new(),
            results: Condvar::new(),
            arena_bytes,
            fill,
        }
    }

    /// Worker: queue `task` (before it completes the row).
    pub(super) fn submit(&self, task: T) {
        let mut g = lock(&self.state);
        g.batches.entry(task.batch()).or_default().expected += 1;
        let q = task.queue();
        g.queue[q].push_back(task);
        drop(g);
        self.tasks.notify_all(); // several decode threads wait on it, each for its own queue
    }

    /// Decode thread of queue `q`: wait for tasks, fill the call (unless the transfer thread waits), take up to
    /// `fill.max` of them with their generation; None at shutdown.
    pub(super) fn take(&self, q: usize) -> Option<(u64, Vec<T>)> {
        let mut g = lock(&self.state);
        while g.queue[q].is_empty() && !g.shutdown {
            g = self.tasks.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        // Fill the call, unless someone waits for results.
        let deadline = Instant::now() + self.fill.wait;
        while g.queue[q].len() < self.fill.target && !g.transfer_waiting && !g.shutdown {
            let Some(left) = time_left(deadline) else { break };
            g = self.tasks.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        if g.shutdown {
            return None;
        }
        let n = g.queue[q].len().min(self.fill.max);
        Some((g.generation, g.queue[q].drain(..n).collect()))
    }

    /// Decode thread `tid`: place the windows of `tasks` (taken in `generation`) in their batches' arenas (arena
    /// b mod A, bump allocation under the mutex; `arena_base(memory, a)` gives arena a's base address, allocating
    /// it on first use). First waits until no thread decodes for an older generation, then marks this thread as
    /// decoding for `generation` until [`finish`](Self::finish).
    pub(super) fn place(
        &self,
        tasks: &[T],
        tid: usize,
        generation: u64,
        mut arena_base: impl FnMut(&mut M, usize) -> std::result::Result<usize, String>,
    ) -> Vec<Placed> {
        let mut placed = Vec::with_capacity(tasks.len());
        let mut g = lock(&self.state);
        while g.decoding.iter().any(|d| d.is_some_and(|d| d < generation)) && !g.shutdown {
            g = self.results.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.decoding[tid] = Some(generation);
        let arenas = g.arena_used.len();
        for t in tasks {
            if let Some(why) = &g.failed {
                placed.push(Err(why.clone()));
                continue;
            }
            if g.generation != generation {
                placed.push(Err("the epoch was restarted".into()));
                continue;
            }
            let (w, h) = t.window();
            let pitch = w as usize * 3;
            let bytes = pitch * h as usize;
            if bytes > self.arena_bytes.min(MAX_WINDOW_BYTES) {
                placed.push(Err(format!("its {w}x{h} window exceeds the GPU arena")));
                continue;
            }
            let a = (t.batch() % arenas as u64) as usize;
            let base = match arena_base(&mut g.memory, a) {
                Ok(base) => base,
                Err(why) => {
                    placed.push(Err(why));
                    continue;
                }
            };
            let off = g.arena_used[a].next_multiple_of(256);
            if off + bytes > self.arena_bytes {
                placed.push(Err("the batch's GPU arena is full".into()));
                continue;
            }
            g.arena_used[a] = off + bytes;
            placed.push(Ok((base + off, pitch)));
        }
        placed
    }

    /// Decode thread: the decoder cannot continue; every task from now on falls back (the first reason stays).
    pub(super) fn fail(&self, why: String) {
        lock(&self.state).failed.get_or_insert(why);
    }

    /// Decode thread `tid`: its call for `generation` is over (nothing writes the arenas for it any more). Push
    /// each outcome into its batch, unless an epoch restart dropped them; `(decoded, fallbacks)` pushed.
    pub(super) fn finish(&self, tid: usize, generation: u64, tasks: Vec<T>, placed: Vec<Placed>) -> Option<(u64, u64)> {
        let mut g = lock(&self.state);
        g.decoding[tid] = None;
        let pushed = (g.generation == generation).then(|| {
            let mut n = (0, 0);
            for (task, at) in tasks.into_iter().zip(placed) {
                if at.is_ok() {
                    n.0 += 1;
                } else {
                    n.1 += 1;
                }
                if let Some(b) = g.batches.get_mut(&task.batch()) {
                    b.done.push(Decoded { task, at });
                }
            }
            n
        });
        drop(g);
        // The transfer thread, and a newer generation's thread waiting in `place` for this one.
        self.results.notify_all();
        pushed
    }

    /// Transfer thread: a new epoch: forget every task and result, empty the arenas.
    pub(super) fn reset(&self) {
        let mut g = lock(&self.state);
        g.generation += 1;
        g.queue.iter_mut().for_each(VecDeque::clear);
        g.batches.clear();
        g.arena_used.fill(0);
    }

    /// Transfer thread: wait until every task of batch `b` has an outcome and take them (empty when b has none).
    /// `aborted` is polled every 50 ms; `None` when it says so, or at shutdown.
    pub(super) fn wait_batch(&self, b: u64, aborted: impl Fn() -> bool) -> Option<Vec<Decoded<T>>> {
        let mut g = lock(&self.state);
        let out = loop {
            match g.batches.get(&b) {
                None => break Some(Vec::new()),
                Some(t) if t.done.len() == t.expected => break g.batches.remove(&b).map(|t| t.done),
                Some(_) => {}
            }
            if aborted() || g.shutdown {
                break None;
            }
            if !g.transfer_waiting {
                g.transfer_waiting = true;
                self.tasks.notify_all(); // a decode thread filling its call starts now
            }
            g = self.results.wait_timeout(g, Duration::from_millis(50)).unwrap_or_else(|p| p.into_inner()).0;
        };
        g.transfer_waiting = false;
        out
    }

    /// Transfer thread: batch `b`'s windows are no longer read: free its arena.
    pub(super) fn release(&self, b: u64) {
        let mut g = lock(&self.state);
        let a = (b % g.arena_used.len() as u64) as usize;
        g.arena_used[a] = 0;
    }

    /// Stop: decode threads return from `take` (after their current call), waits in `place` and `wait_batch`
    /// end. Idempotent.
    pub(super) fn shutdown(&self) {
        lock(&self.state).shutdown = true;
        self.tasks.notify_all();
        self.results.notify_all();
    }
}

/// Time left until the fill wait's `deadline` (None: it passed).
#[cfg(not(feature = "loom"))]
fn time_left(deadline: Instant) -> Option<Duration> {
    deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
}

/// Under loom time does not pass (its `wait_timeout` never times out either): the fill wait ends only by its
/// conditions (tasks, the transfer thread waiting, shutdown), so the models check that these alone end it.
#[cfg(feature = "loom")]
fn time_left(_deadline: Instant) -> Option<Duration> {
    Some(FILL_WAIT)
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::sync::{AtomicU64, Ordering};

    /// splitmix64: the stress test's randomness (seeded per thread and run, so a failure names its seed).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    type Q = DecodeQueue<FakeTask, ()>;
    const DEPTH: u64 = 2; // host ring depth K: A = K + 1 arenas
    const A: usize = DEPTH as usize + 1;
    const ROWS: u64 = 16;
    const BATCHES: u64 = 12;
    const EPOCHS: u64 = 4;
    const WORKERS: usize = 8;
    const ARENA: usize = 16 << 10;
    /// Decode threads: [queue 0, queue 0, queue 1], as `DECODERS` (threads.rs).
    const QUEUES: [usize; 3] = [0, 0, 1];

    #[derive(Debug, Default)]
    struct Totals {
        runs: u64,
        submitted: u64,
        collected: u64,
        decoded: u64,
        fallback_decoder: u64,
        fallback_full: u64,
        fallback_too_big: u64,
        fallback_stopped: u64,
        restarts: u64,
        dropped: u64,
    }

    /// The fake device: arena a is words [a * ARENA / 4, (a + 1) * ARENA / 4); a decode writes its task id + 1
    /// into every word of its window; `writing` holds the byte ranges being written now.
    struct Device {
        words: Vec<std::sync::atomic::AtomicU32>,
        writing: Mutex<Vec<(usize, usize)>>,
        calls: std::sync::atomic::AtomicU64,
    }

    fn words(at: usize, pitch: usize, h: u32) -> std::ops::Range<usize> {
        at / 4..(at + pitch * h as usize).div_ceil(4)
    }

    /// A decode thread: the production sequence (take, place, decode, finish) with a fake decoder that spins a
    /// few µs per window, fails 5 % of them, and (when `fail_call` says so) fails a whole call.
    fn decoder(q: &Q, dev: &Device, queue: usize, tid: usize, seed: u64, fail_call: Option<u64>) {
        let mut rng = Rng(seed ^ (tid as u64) << 56);
        while let Some((generation, tasks)) = q.take(queue) {
            let mut placed = q.place(&tasks, tid, generation, |_, a| Ok(a * ARENA));
            let call = dev.calls.fetch_add(1, Ordering::Relaxed);
            if fail_call == Some(call) {
                q.fail("the GPU decoder stopped: fake".into());
                placed.iter_mut().filter(|p| p.is_ok()).for_each(|p| *p = Err("the GPU decoder stopped: fake".into()));
            }
            let mine: Vec<(usize, usize)> = placed
                .iter()
                .zip(&tasks)
                .filter_map(|(p, t)| p.as_ref().ok().map(|&(at, pitch)| (at, at + pitch * t.h as usize)))
                .collect();
            {
                let mut w = lock(&dev.writing);
                for &(s, e) in &mine {
                    if let Some(o) = w.iter().find(|o| o.0 < e && s < o.1) {
                        panic!("seed {seed}: [{s}, {e}) placed over {o:?}, which is being written");
                    }
                }
                w.extend(&mine);
            }
            for (p, t) in placed.iter_mut().zip(&tasks) {
                let Ok((at, pitch)) = *p else { continue };
                if rng.chance(5) {
                    *p = Err("fake decode error".into());
                    continue;
                }
                for i in words(at, pitch, t.h) {
                    dev.words[i].store(t.id as u32 + 1, Ordering::Relaxed);
                }
                let spin = Instant::now() + Duration::from_micros(rng.below(5));
                while Instant::now() < spin {
                    std::hint::spin_loop();
                }
            }
            lock(&dev.writing).retain(|o| !mine.contains(o));
            q.finish(tid, generation, tasks, placed);
        }
    }

    /// One run: a fresh queue, EPOCHS epochs of BATCHES batches of ROWS rows made by WORKERS workers that claim
    /// rows from a counter (fast mode) and may work BATCHES ahead only within the A - 1 batches after the one
    /// the transfer thread holds (the station's guarantee); GPU rows go to random queues with random windows.
    /// An epoch may be restarted at a random batch. The transfer thread checks every batch it collects.
    fn run(seed: u64, t: &mut Totals) {
        let mut rng = Rng(seed);
        let q =
            Q::new(2, QUEUES.len(), A, ARENA, Fill { max: MAX_SUB_BATCH, target: 8, wait: Duration::from_micros(200) });
        let dev = Device {
            words: (0..A * ARENA / 4).map(|_| std::sync::atomic::AtomicU32::new(0)).collect(),
            writing: Mutex::new(Vec::new()),
            calls: std::sync::atomic::AtomicU64::new(0),
        };
        // A quarter of the runs lose the decoder at a random call: every task from then on falls back.
        let fail_call = rng.chance(25).then(|| rng.below(40));
        std::thread::scope(|s| {
            for (tid, &queue) in QUEUES.iter().enumerate() {
                let (q, dev) = (&q, &dev);
                s.spawn(move || decoder(q, dev, queue, tid, seed, fail_call));
            }
            for epoch in 0..EPOCHS {
                q.reset(); // the station is rewound: no worker of the previous epoch runs
                let restart_at = rng.chance(50).then(|| rng.below(BATCHES));
                let released = AtomicU64::new(0);
                let next = AtomicU64::new(0);
                let stop = std::sync::atomic::AtomicBool::new(false);
                let complete: Vec<AtomicU64> = (0..BATCHES).map(|_| AtomicU64::new(0)).collect();
                let expected: Vec<Mutex<Vec<u64>>> = (0..BATCHES).map(|_| Mutex::new(Vec::new())).collect();
                std::thread::scope(|w| {
                    for worker in 0..WORKERS {
                        let (q, released, next, stop, complete, expected) =
                            (&q, &released, &next, &stop, &complete, &expected);
                        let mut rng = Rng(seed ^ (epoch << 40) ^ ((worker as u64) << 48) ^ 0xabcd);
                        w.spawn(move || {
                            loop {
                                let seq = next.fetch_add(1, Ordering::Relaxed);
                                if seq >= BATCHES * ROWS {
                                    return;
                                }
                                let b = seq / ROWS;
                                while b >= released.load(Ordering::Acquire) + A as u64 {
                                    if stop.load(Ordering::Relaxed) {
                                        return;
                                    }
                                    std::thread::yield_now();
                                }
                                if stop.load(Ordering::Relaxed) {
                                    return;
                                }
                                if rng.chance(60) {
                                    let id = (epoch << 32) | seq;
                                    let (w, h) =
                                        if rng.chance(2) { (80, 80) } else { (4 + rng.below(45), 4 + rng.below(45)) };
                                    lock(&expected[b as usize]).push(id);
                                    let queue = rng.below(2) as usize;
                                    q.submit(FakeTask { id, batch: b, queue, w: w as u32, h: h as u32 });
                                }
                                complete[b as usize].fetch_add(1, Ordering::Release);
                            }
                        });
                    }
                    for b in 0..BATCHES {
                        if restart_at == Some(b) {
                            stop.store(true, Ordering::Relaxed);
                            t.restarts += 1;
                            break;
                        }
                        while complete[b as usize].load(Ordering::Acquire) < ROWS {
                            std::thread::yield_now();
                        }
                        let t0 = Instant::now();
                        let aborted = || {
                            assert!(t0.elapsed() < Duration::from_secs(10), "seed {seed}: batch {b} waited 10 s");
                            false
                        };
                        let got = q.wait_batch(b, aborted).expect("not shut down");
                        check_batch(seed, epoch, b, &got, &lock(&expected[b as usize]), &dev, t);
                        q.release(b);
                        released.store(b + 1, Ordering::Release);
                    }
                });
                let submitted: u64 = expected.iter().map(|e| lock(e).len() as u64).sum();
                t.submitted += submitted;
                let collected: u64 =
                    expected[..released.load(Ordering::Relaxed) as usize].iter().map(|e| lock(e).len() as u64).sum();
                t.dropped += submitted - collected;
                if restart_at.is_none() {
                    assert_eq!(submitted, collected, "seed {seed}: a whole epoch is collected");
                }
            }
            q.shutdown();
        });
        assert!(lock(&dev.writing).is_empty());
        t.runs += 1;
    }

    /// Batch b's outcomes: exactly its tasks, of this epoch, each once; placed windows inside arena b mod A, not
    /// overlapping, still holding what their decode wrote; fallbacks for a known reason.
    fn check_batch(
        seed: u64,
        epoch: u64,
        b: u64,
        got: &[Decoded<FakeTask>],
        want: &[u64],
        dev: &Device,
        t: &mut Totals,
    ) {
        let mut ids: Vec<u64> = got.iter().map(|d| d.task.id).collect();
        ids.sort_unstable();
        let mut want = want.to_vec();
        want.sort_unstable();
        assert_eq!(ids, want, "seed {seed}: epoch {epoch} batch {b}");
        let a = (b % A as u64) as usize;
        let mut spans = Vec::new();
        for d in got {
            assert_eq!((d.task.batch, d.task.id >> 32), (b, epoch), "seed {seed}");
            match &d.at {
                Ok((at, pitch)) => {
                    assert_eq!(*pitch, d.task.w as usize * 3);
                    let end = at + pitch * d.task.h as usize;
                    assert!(a * ARENA <= *at && end <= (a + 1) * ARENA, "seed {seed}: {d:?} outside arena {a}");
                    assert!(
                        words(*at, *pitch, d.task.h)
                            .all(|i| dev.words[i].load(Ordering::Relaxed) == d.task.id as u32 + 1),
                        "seed {seed}: the window of {d:?} was overwritten"
                    );
                    spans.push((*at, end));
                    t.decoded += 1;
                }
                Err(why) if why == "fake decode error" => t.fallback_decoder += 1,
                Err(why) if why == "the batch's GPU arena is full" => t.fallback_full += 1,
                Err(why) if why.contains("exceeds the GPU arena") => t.fallback_too_big += 1,
                Err(why) if why.starts_with("the GPU decoder stopped") => t.fallback_stopped += 1,
                Err(why) => panic!("seed {seed}: unexpected fallback {why:?}"),
            }
        }
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "seed {seed}: overlapping windows {spans:?}");
        t.collected += got.len() as u64;
    }

    /// Stress: many runs of `run` (8 workers, 3 decode threads, epochs with random restarts and failures) for
    /// TRDATA_STRESS_SECS seconds (default 2; at least 8 runs).
    #[test]
    fn decode_queue_stress_epochs_restarts_and_failures() {
        let secs: f64 = std::env::var("TRDATA_STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0);
        let t0 = Instant::now();
        let mut t = Totals::default();
        let base = std::env::var("TRDATA_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
        while t.runs < 8 || t0.elapsed().as_secs_f64() < secs {
            run(base.wrapping_add(t.runs), &mut t);
        }
        eprintln!("decode queue stress: {:.1} s, {t:?}", t0.elapsed().as_secs_f64());
        assert_eq!(t.submitted, t.collected + t.dropped);
        // Every path was taken.
        assert!(t.restarts > 0 && t.dropped > 0 && t.decoded > 0, "{t:?}");
        assert!(t.fallback_decoder > 0 && t.fallback_full > 0 && t.fallback_too_big > 0, "{t:?}");
    }
}

/// A task of the models and the stress test: an id, its batch and queue, a window.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
struct FakeTask {
    id: u64,
    batch: u64,
    queue: usize,
    w: u32,
    h: u32,
}

#[cfg(test)]
impl QueueTask for FakeTask {
    fn batch(&self) -> u64 {
        self.batch
    }
    fn queue(&self) -> usize {
        self.queue
    }
    fn window(&self) -> (u32, u32) {
        (self.w, self.h)
    }
}

/// The queue protocol under loom (`make test-loom`): the production `DecodeQueue`, with virtual arena addresses
/// (arena a at `a * ARENA`) and a fake decoder that records the byte ranges it is writing. loom's `wait_timeout`
/// never times out and the fill wait's deadline never passes (`time_left`), so a wakeup that the protocol does
/// not send is a reported deadlock, not a slow test.
#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::*;
    use crate::sync::{Arc, thread_spawn};

    type Q = DecodeQueue<FakeTask, ()>;
    const ARENA: usize = 1 << 12;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(f);
    }

    fn task(id: u64, batch: u64, queue: usize) -> FakeTask {
        FakeTask { id, batch, queue, w: 8, h: 8 } // 192 bytes
    }

    /// Byte ranges being written by decodes now, with the generation of each.
    type Writing = Arc<Mutex<Vec<(usize, usize, u64)>>>;

    /// A decode thread's loop, as `decode_main`: take, place, "decode" (register each placed window as being
    /// written, checking it overlaps no window another decode is writing, then unregister), finish.
    fn decoder(q: Arc<Q>, queue: usize, tid: usize, writing: Writing) {
        while let Some((generation, tasks)) = q.take(queue) {
            let placed = q.place(&tasks, tid, generation, |_, a| Ok(a * ARENA));
            let mine: Vec<(usize, usize, u64)> = placed
                .iter()
                .zip(&tasks)
                .filter_map(|(p, t)| p.as_ref().ok().map(|&(at, pitch)| (at, at + pitch * t.h as usize, generation)))
                .collect();
            {
                let mut w = lock(&writing);
                for &(s, e, g) in &mine {
                    if let Some(o) = w.iter().find(|o| o.0 < e && s < o.1) {
                        panic!("generation {g} writes [{s}, {e}) while {o:?} is being written");
                    }
                }
                w.extend(&mine);
            }
            lock(&writing).retain(|o| !mine.contains(o));
            q.finish(tid, generation, tasks, placed);
        }
    }

    fn start_decoder(q: &Arc<Q>, queue: usize, tid: usize, writing: &Writing) -> loom::thread::JoinHandle<()> {
        let (q, writing) = (Arc::clone(q), Arc::clone(writing));
        thread_spawn(move || decoder(q, queue, tid, writing))
    }

    /// The station's guarantee, modeled: batches whose rows are all complete (every task of them submitted).
    type Complete = Arc<(Mutex<u64>, Condvar)>;

    fn wait_complete(c: &Complete, batches: u64) {
        let mut g = lock(&c.0);
        while *g < batches {
            g = c.1.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn ids(d: &[Decoded<FakeTask>], batch: u64) -> Vec<u64> {
        let mut ids: Vec<u64> = d.iter().inspect(|d| assert_eq!(d.task.batch, batch)).map(|d| d.task.id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn decode_queue_loom_delivers_every_task_once_to_its_batch() {
        model(|| {
            // Production fill policy: with 3 tasks queued the decode thread waits to fill its call until the
            // transfer thread waits (loom never times the wait out).
            let q = Arc::new(Q::new(1, 1, 2, ARENA, FILL));
            let writing = Writing::default();
            let complete = Complete::default();
            let dec = start_decoder(&q, 0, 0, &writing);
            let worker = thread_spawn({
                let (q, complete) = (Arc::clone(&q), Arc::clone(&complete));
                move || {
                    q.submit(task(0, 0, 0));
                    q.submit(task(1, 0, 0));
                    *lock(&complete.0) = 1;
                    complete.1.notify_all();
                    q.submit(task(2, 1, 0));
                    *lock(&complete.0) = 2;
                    complete.1.notify_all();
                }
            });
            for (b, want) in [(0, vec![0, 1]), (1, vec![2])] {
                wait_complete(&complete, b + 1);
                let d = q.wait_batch(b, || false).expect("not shut down");
                assert_eq!(ids(&d, b), want);
                for x in &d {
                    let (at, pitch) = *x.at.as_ref().expect("fits");
                    let a = b as usize % 2;
                    assert!(a * ARENA <= at && at + pitch * 8 <= (a + 1) * ARENA, "{x:?} outside arena {a}");
                }
                q.release(b);
            }
            worker.join().unwrap();
            q.shutdown();
            dec.join().unwrap();
        });
    }

    #[test]
    fn decode_queue_loom_reset_during_a_decode() {
        model(|| {
            // One window fills an arena: without the `decoding` guard the new generation's window would be placed
            // where the old one may still be written. Two queues, one decode thread each, calls start at once.
            let q = Arc::new(Q::new(2, 2, 1, 192, Fill { target: 1, ..FILL }));
            let writing = Writing::default();
            let decs = [start_decoder(&q, 0, 0, &writing), start_decoder(&q, 1, 1, &writing)];
            q.submit(task(0, 0, 0)); // epoch 0, batch 0
            q.reset(); // epoch restart: no worker runs, the old task may be decoding
            q.submit(task(1, 0, 1)); // epoch 1, batch 0
            let d = q.wait_batch(0, || false).expect("not shut down");
            assert_eq!(ids(&d, 0), [1], "only the new generation's task");
            assert!(d[0].at.is_ok(), "the arena was emptied by reset: {:?}", d[0].at);
            q.release(0);
            q.shutdown();
            for t in decs {
                t.join().unwrap();
            }
        });
    }

    #[test]
    fn decode_queue_loom_close_ends_every_wait() {
        model(|| {
            let q = Arc::new(Q::new(1, 1, 2, ARENA, FILL));
            let writing = Writing::default();
            let dec = start_decoder(&q, 0, 0, &writing); // fills: 1 task < FILL_TARGET
            q.submit(task(0, 0, 0));
            let transfer = thread_spawn({
                let q = Arc::clone(&q);
                move || q.wait_batch(0, || false).map(|d| ids(&d, 0))
            });
            q.shutdown();
            // Closed while waiting, or the task was decoded first.
            let got = transfer.join().unwrap();
            assert!(got.is_none() || got == Some(vec![0]), "{got:?}");
            dec.join().unwrap();
        });
    }
}
