//! Tests of the pack tooling: real ImageFolder-layout trees written here, packed, read back byte for byte; the
//! atomic publication under errors and cancels; re-encoding; verification; and loaders over packed files
//! (the same batches as over the source, exactly once per epoch in partial mode, exact resume).

use super::*;
use crate::augment::{DType, Layout, OutputSpec, SamplePipeline, TransformSpec};
use crate::config::LoaderConfig;
use crate::decode::DecodeLimits;
use crate::loader::{BatchImages, Loader, NextStep};
use crate::plan::LastBatch;
use crate::source::{Files, PackedFile, PackedMode, PartialOptions, file_list, packed_dataset};
use crate::sync::Arc;
use crate::topology::PinMode;
use crate::worker::ErrorPolicy;
use std::os::unix::fs::FileTypeExt;
use std::time::Duration;

fn jpeg(seed: u32, w: u32, h: u32, sub: Subsampling) -> Vec<u8> {
    let c = crate::synthetic::encode::input_channels(sub) as u32;
    let px: Vec<u8> = (0..w * h * c)
        .map(|i| {
            let (x, y) = ((i / c) % w, (i / c) / w);
            ((seed * 13) % 100 + x + y / 2 + (i % c) * 20) as u8 // smooth, no wrap-around (≤ 229)
        })
        .collect();
    JpegEncoder::new().unwrap().encode(&px, w, h, 90, sub).unwrap()
}

/// An ImageFolder-layout tree (root/class_k/NNN.jpg) of `n` JPEGs of various sizes and subsamplings, plus the
/// dataset over it (labels = class index), like `trdata.ImageFolder` builds.
fn image_folder(name: &str, n: u32) -> (PathBuf, Dataset) {
    let root = crate::test_data::fresh_dir(&format!("pack-{name}"));
    let subs = [Subsampling::S420, Subsampling::S444, Subsampling::Gray, Subsampling::S422];
    let (mut paths, mut labels) = (Vec::new(), Vec::new());
    for i in 0..n {
        let class = i % 3;
        let dir = root.join(format!("class_{class}"));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{i:03}.jpg"));
        fs::write(&p, jpeg(i, 24 + (i * 5) % 40, 20 + (i * 3) % 30, subs[(i % 4) as usize])).unwrap();
        paths.push(p);
        labels.push(i64::from(class));
    }
    let mut ds = file_list(paths, labels).unwrap();
    ds.classes = (0..3).map(|c| OsString::from(format!("class_{c}"))).collect();
    (root, ds)
}

fn cfg(workers: i128, block_bytes: i128, classes: &[OsString]) -> PackConfig {
    PackConfig::new(None, None, None, Some(workers), Some(block_bytes), classes.to_vec()).unwrap()
}

/// Make `path` look older than [`STALE_AFTER`].
fn age(path: &Path) {
    let then = std::time::SystemTime::now() - STALE_AFTER - Duration::from_secs(5);
    File::options().write(true).open(path).unwrap().set_modified(then).unwrap();
}

fn never_cancel(_: u64) -> bool {
    true
}

fn files(ds: &Dataset) -> &[PathBuf] {
    &ds.store_as::<Files>().expect("files").0
}

#[test]
fn packing_keeps_the_source_bytes_order_labels_and_classes_for_any_thread_count() {
    let (root, mut ds) = image_folder("keep", 40);
    // A damaged file and a PNG-in-disguise among them, as ImageNet has: stored as they are.
    let bad = root.join("class_1/zz_bad.jpg");
    fs::write(&bad, b"this is no image at all").unwrap();
    ds.store_as_mut::<Files>().expect("files").0.push(bad.clone());
    ds.labels.push(1);
    let dst = root.join("out.trdpack");
    let s1 = pack(&ds, &dst, &cfg(1, 4096, &ds.classes), &never_cancel).unwrap();
    let one = fs::read(&dst).unwrap();
    let s4 = pack(&ds, &dst, &cfg(4, 4096, &ds.classes), &never_cancel).unwrap();
    assert_eq!(fs::read(&dst).unwrap(), one, "the file does not depend on the thread count");
    assert_eq!((s1.records, s4.records, s1.bytes_out), (41, 41, one.len() as u64));
    assert_eq!(s1.bytes_in, files(&ds).iter().map(|p| fs::metadata(p).unwrap().len()).sum::<u64>());
    assert_eq!(s1.warnings.len(), 1, "{:?}", s1.warnings);
    assert_eq!(s1.warnings[0].0, 40);
    let f = PackedFile::open(&dst, PackedMode::Full, PartialOptions::default()).unwrap();
    let ix = f.index();
    for (i, p) in files(&ds).iter().enumerate() {
        assert_eq!(&*f.record(i, &|| false).unwrap(), &fs::read(p).unwrap()[..], "record {i}");
        assert_eq!(ix.rows[i].label, ds.labels[i]);
    }
    assert_eq!(ix.meta.classes, ds.classes);
    let identity = ds.identity(); // a checkpoint of the source resumes over its pack
    assert_eq!(ix.meta.options, PackOptions { source: "files".into(), identity, ..PackOptions::default() });
    // Header fields for ROI/GPU planning, from the JPEG headers.
    let m = ix.rows[2].meta; // i = 2: gray, 34×26
    assert_eq!((m.width, m.height, m.format, m.subsampling, m.channels), (34, 26, RecordFormat::Jpeg, 4, 1));
    assert_eq!(ix.rows[1].meta.subsampling, 1);
    assert!(ix.rows[0].meta.gpu_decodable());
    assert_eq!(ix.rows[40].meta.flags, FLAG_UNREADABLE);
    assert!(ix.blocks.len() > 5, "4 KiB blocks: {} blocks", ix.blocks.len());
    assert!(verify(&dst, Some(2), &never_cancel).unwrap().iter().map(|(r, _)| *r).eq([40]));
}

#[test]
fn failures_and_cancels_leave_no_file_and_never_replace_a_good_one() {
    let (root, mut ds) = image_folder("atomic", 300);
    let dst = root.join("data.trdpack");
    let leftovers = |root: &Path| -> Vec<String> {
        fs::read_dir(root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect()
    };
    // A temp file of a writer killed earlier (unlocked, older than STALE_AFTER) is removed by the next pack.
    let stale = temp_path(&dst, u32::MAX - 1, 7);
    fs::write(&stale, [0u8; 4096]).unwrap();
    age(&stale);
    // Cancelled after the first chunk: nothing at dst, no temp file.
    let e = pack(&ds, &dst, &cfg(2, 8192, &[]), &|done| done < 64).unwrap_err();
    assert!(e.to_string().contains("cancelled"), "{e}");
    assert!(!dst.exists());
    assert!(leftovers(&root).is_empty(), "{:?}", leftovers(&root));
    // A good pack, then a pack that fails midway (a file vanished): the good one stays, no temp file.
    pack(&ds, &dst, &cfg(2, 8192, &[]), &never_cancel).unwrap();
    let good = fs::read(&dst).unwrap();
    let gone = files(&ds)[200].clone();
    fs::remove_file(&gone).unwrap();
    match pack(&ds, &dst, &cfg(2, 8192, &[]), &never_cancel) {
        Err(TrdataError::Decode(e)) => assert_eq!((e.path, e.index, e.error.kind), (gone, 200, ImageErrorKind::Io)),
        other => panic!("expected a DecodeError naming the missing file, got {other:?}"),
    }
    assert_eq!(fs::read(&dst).unwrap(), good);
    assert!(leftovers(&root).is_empty());
    // A writer dropped mid-write (a panic or a kill before the header): the bytes on disk have no magic.
    let partial = root.join("partial.trdpack");
    {
        let mut w = PackWriter::new(File::create(&partial).unwrap(), 8192).unwrap();
        w.push(b"abc", 0, RecordMeta::raw(1, 1, 3)).unwrap();
    }
    let msg = PackedIndex::open(&partial).unwrap_err().to_string();
    assert!(msg.contains("unfinished trdata pack"), "{msg}");
    // Empty file list: refused by the writer.
    ds.store_as_mut::<Files>().expect("files").0.truncate(1);
    ds.labels.truncate(1);
    assert!(pack(&ds, &dst, &cfg(1, 8192, &[]), &never_cancel).is_ok());
}

#[test]
fn parameters_are_checked_once_in_the_core() {
    let param = |r: Result<PackConfig>| match r {
        Err(TrdataError::Config { parameter, message }) => format!("invalid {parameter}: {message}"),
        other => panic!("expected a ConfigError, got {other:?}"),
    };
    assert!(
        param(PackConfig::new(Some(256), Some(512), None, None, None, vec![]))
            .starts_with("invalid max_side: 512 must be None when short_side=256")
    );
    assert!(
        param(PackConfig::new(Some(0), None, None, None, None, vec![]))
            .starts_with("invalid short_side: 0 must be in 1..=65535")
    );
    assert!(
        param(PackConfig::new(None, None, Some(101), None, None, vec![]))
            .starts_with("invalid quality: 101 must be in 1..=100")
    );
    assert!(param(PackConfig::new(None, None, None, Some(0), None, vec![])).starts_with("invalid workers: 0"));
    assert!(param(PackConfig::new(None, None, None, None, Some(100), vec![])).starts_with("invalid block_bytes: 100"));
    let c = PackConfig::new(Some(256), None, None, Some(2), None, vec![]).unwrap();
    assert_eq!((c.quality, c.reencodes(), c.block_bytes), (Some(90), true, DEFAULT_BLOCK_BYTES));
    assert!(!PackConfig::new(None, None, None, None, None, vec![]).unwrap().reencodes());
    // torchvision's Resize rule: int(size · long / short); only ever downscaling.
    assert_eq!(c.target_size(500, 375), (341, 256));
    assert_eq!(c.target_size(375, 500), (256, 341));
    assert_eq!(c.target_size(200, 100), (200, 100));
    let m = PackConfig::new(None, Some(300), Some(80), None, None, vec![]).unwrap();
    assert_eq!(
        (m.target_size(500, 375), m.target_size(3000, 2), m.target_size(100, 80)),
        ((300, 225), (300, 1), (100, 80))
    );
}

#[test]
fn reencoding_resizes_like_pillow_and_writes_baseline_420_jpegs() {
    let (root, ds) = image_folder("reencode", 12);
    let dst = root.join("small.trdpack");
    let c = PackConfig::new(Some(16), None, Some(95), Some(3), None, vec![]).unwrap();
    let s = pack(&ds, &dst, &c, &never_cancel).unwrap();
    assert!(s.bytes_out > 0 && s.warnings.is_empty());
    let f = PackedFile::open(&dst, PackedMode::Full, PartialOptions::default()).unwrap();
    let mut dec = Decoder::new().unwrap();
    let mut reference_scratch = WorkerScratch::new().unwrap();
    for (i, p) in files(&ds).iter().enumerate() {
        let src = fs::read(p).unwrap();
        let info = dec.read_header(&src).unwrap();
        let (tw, th) = c.target_size(info.width, info.height);
        let rec = f.record(i, &|| false).unwrap();
        let got = dec.read_header(&rec).unwrap();
        assert_eq!((got.width, got.height, got.subsampling, got.progressive), (tw, th, Subsampling::S420, false));
        assert_eq!(f.index().rows[i].meta.subsampling, 3);
        // The decoded record is close to the source resized by the same (Pillow-exact) resampler.
        let mut out = Vec::new();
        dec.decode_full_rgb(&rec, &mut out).unwrap();
        let spec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None };
        let resize = SamplePipeline::new(vec![TransformSpec::ResizeExact { height: th, width: tw }], spec).unwrap();
        let resize = resize.with_dct_scaling(DctScaling::MinRatio(1e9)).unwrap();
        let mut want = vec![0u8; resize.sample_bytes()];
        resize.process(&mut reference_scratch, &src, SampleKey { seed: 0, epoch: 0, index: 0 }, &mut want).unwrap();
        let mse =
            out.iter().zip(&want).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum::<f64>() / out.len() as f64;
        let psnr = 10.0 * (255.0f64.powi(2) / mse.max(1e-9)).log10();
        assert!(psnr > 30.0, "record {i}: {psnr:.1} dB");
    }
    let ix = PackedIndex::open(&dst).unwrap();
    assert_eq!((ix.meta.options.short_side, ix.meta.options.quality), (Some(16), Some(95)));
}

#[test]
fn verify_names_damaged_records_and_raw_pixels_pack_too() {
    let data: Vec<u8> = (0..5 * 4 * 3 * 3).map(|i| (i * 7) as u8).collect();
    let ds = crate::source::arrays(data.clone(), 5, 4, 3, 3, vec![1, 2, 3, 4, 5]).unwrap();
    let root = crate::test_data::fresh_dir("pack-raw");
    let dst = root.join("raw.trdpack");
    pack(&ds, &dst, &cfg(2, 4096, &[]), &never_cancel).unwrap();
    let f = PackedFile::open(&dst, PackedMode::Partial, PartialOptions::default()).unwrap();
    for i in 0..5 {
        assert_eq!(&*f.record(i, &|| false).unwrap(), &data[i * 36..(i + 1) * 36]);
        assert_eq!(f.index().rows[i].meta, RecordMeta::raw(4, 3, 3));
    }
    assert_eq!(f.index().meta.options.source, "arrays");
    assert!(verify(&dst, Some(1), &never_cancel).unwrap().is_empty());
    let mut bytes = fs::read(&dst).unwrap();
    let at = f.index().rows[3].offset as usize;
    bytes[at] ^= 1;
    fs::write(&dst, &bytes).unwrap();
    let bad = verify(&dst, Some(3), &never_cancel).unwrap();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].0, 3);
    assert!(bad[0].1.contains("CRC32C mismatch"), "{bad:?}");
}

fn loader_cfg(batch: usize, workers: usize, shuffle: bool, reproducible: bool) -> LoaderConfig {
    let spec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None, pad_to: None };
    LoaderConfig {
        batch_size: batch,
        workers: Some(workers),
        shuffle,
        seed: 5,
        reproducible,
        last_batch: LastBatch::Partial,
        rank: 0,
        world_size: 1,
        pin: PinMode::None,
        cpus: None,
        on_error: ErrorPolicy::Raise,
        prefetch: 2,
        max_held_batches: 4,
        pipeline: SamplePipeline::new(
            vec![TransformSpec::RandomResizedCrop { height: 12, width: 12, scale: (0.3, 1.0), ratio: (0.75, 1.33) }],
            spec,
        )
        .unwrap()
        .into(),
        decode_limits: DecodeLimits::default(),
        decode: crate::config::DecodeMode::Cpu,
        gpu_libraries: Default::default(),
    }
}

/// Every batch of one epoch (from `first` batches on, after a `load_state`): (indices, labels, pixels).
type Batches = Vec<(Vec<i64>, Vec<i64>, Vec<u8>)>;

fn epoch(loader: &mut Loader, max_batches: usize) -> Batches {
    loader.start_epoch().unwrap();
    let mut out = Vec::new();
    while out.len() < max_batches {
        match loader.next_step(Duration::from_secs(30)).unwrap() {
            NextStep::Step(mut batches) => {
                let b = batches.remove(0);
                let BatchImages::Host(lease) = &b.images else { panic!("CPU batch") };
                out.push((b.indices.clone(), b.labels.clone(), lease.buffer().images(lease.rows).to_vec()));
            }
            NextStep::Timeout => {}
            NextStep::End => break,
        }
    }
    out
}

/// The promise: without re-encoding, a reproducible loader over the pack yields byte-identical batches
/// to one over the source — in full mode for shuffled epochs too, in partial mode for the file order; a
/// shuffled partial loader delivers every sample exactly once per epoch, the same for any worker count, and
/// resumes exactly.
#[test]
fn loaders_over_packed_files_match_the_source() {
    let (root, ds) = image_folder("loader", 150);
    let dst = root.join("data.trdpack");
    pack(&ds, &dst, &cfg(2, 4096, &ds.classes), &never_cancel).unwrap();
    let source = Arc::new(ds);
    let run = |ds: Arc<Dataset>, c: LoaderConfig, epochs: usize| -> Vec<Batches> {
        let mut l = Loader::with_devices(ds, c, crate::loader::DeviceSpec::Cpu).unwrap();
        let out = (0..epochs).map(|_| epoch(&mut l, usize::MAX)).collect();
        l.close();
        out
    };
    let full = Arc::new(packed_dataset(&dst, PackedMode::Full, PartialOptions::default()).unwrap());
    let partial = Arc::new(
        packed_dataset(
            &dst,
            PackedMode::Partial,
            PartialOptions { window_blocks: Some(2), prefetch_blocks: Some(1), ..PartialOptions::default() },
        )
        .unwrap(),
    );
    let reference = run(Arc::clone(&source), loader_cfg(16, 3, true, true), 2);
    assert_eq!(run(Arc::clone(&full), loader_cfg(16, 2, true, true), 2), reference);
    let in_order = run(Arc::clone(&source), loader_cfg(16, 3, false, true), 1);
    assert_eq!(run(Arc::clone(&partial), loader_cfg(16, 4, false, true), 1), in_order);
    // Shuffled partial: a permutation per epoch, different per epoch, identical for 1 and 4 workers.
    let shuffled = run(Arc::clone(&partial), loader_cfg(16, 4, true, true), 2);
    assert_eq!(run(Arc::clone(&partial), loader_cfg(16, 1, true, true), 2), shuffled);
    for e in &shuffled {
        let mut seen: Vec<i64> = e.iter().flat_map(|b| b.0.clone()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..150).collect::<Vec<_>>());
    }
    assert_ne!(
        shuffled[0].iter().map(|b| &b.0).collect::<Vec<_>>(),
        shuffled[1].iter().map(|b| &b.0).collect::<Vec<_>>()
    );
    // Exact resume mid-epoch: the rest of the epoch equals the uninterrupted run.
    let mut l =
        Loader::with_devices(Arc::clone(&partial), loader_cfg(16, 3, true, true), crate::loader::DeviceSpec::Cpu)
            .unwrap();
    let head = epoch(&mut l, 4);
    let state = l.state();
    l.close();
    let mut resumed =
        Loader::with_devices(Arc::clone(&partial), loader_cfg(16, 2, true, true), crate::loader::DeviceSpec::Cpu)
            .unwrap();
    resumed.load_state(&state).unwrap();
    let tail = epoch(&mut resumed, usize::MAX);
    resumed.close();
    assert_eq!([head, tail].concat(), shuffled[0]);
    // The partial cache stayed within its documented bound (block_cache.rs): the blocks cache_bytes holds, plus
    // one held by each reader (at most 4 workers at once).
    let p = partial.store_as::<PackedFile>().expect("a pack");
    let cache = p.cache().unwrap();
    let smallest = p.index().blocks.iter().map(|b| b.bytes).min().unwrap();
    let bound = (cache.cache_bytes() / smallest) as usize + 4;
    assert!(cache.peak_live_blocks() <= bound, "peak {} above {bound}", cache.peak_live_blocks());
}

/// A damaged record surfaces from the loader as a DecodeError naming `file#record`.
#[test]
fn a_damaged_record_is_a_decode_error_naming_file_and_record() {
    let (root, ds) = image_folder("damaged", 20);
    let dst = root.join("data.trdpack");
    pack(&ds, &dst, &cfg(1, 4096, &[]), &never_cancel).unwrap();
    let ix = PackedIndex::open(&dst).unwrap();
    let mut bytes = fs::read(&dst).unwrap();
    bytes[ix.rows[7].offset as usize + 30] ^= 0xff;
    fs::write(&dst, &bytes).unwrap();
    for mode in [PackedMode::Full, PackedMode::Partial] {
        let ds = packed_dataset(&dst, mode, PartialOptions::default()).unwrap();
        let mut l = Loader::new(ds, loader_cfg(4, 2, false, true)).unwrap();
        l.start_epoch().unwrap();
        let err = loop {
            match l.next_step(Duration::from_secs(30)) {
                Ok(NextStep::End) => panic!("no error"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        l.close();
        match err {
            TrdataError::Decode(e) => {
                assert_eq!((e.index, e.error.kind.clone()), (7, ImageErrorKind::Corrupt));
                assert_eq!(e.path, PathBuf::from(format!("{}#7", dst.display())));
                assert!(e.error.message.contains("record 7 fails its CRC32C check"), "{e}");
            }
            other => panic!("expected a DecodeError, got {other:?}"),
        }
    }
}

/// Blobs of `n` distinct records of `bytes` bytes each (not images: stored as they are, flagged unreadable).
fn blobs(n: usize, bytes: usize, tag: u8) -> Dataset {
    let blobs = (0..n).map(|i| (0..bytes).map(|k| (k * 31 + i * 7) as u8 ^ tag).collect()).collect();
    crate::source::bytes(blobs, (0..n as i64).collect()).unwrap()
}

#[test]
fn two_packs_to_one_destination_each_publish_only_their_own_file() {
    // Before: both wrote `<dst>.tmp.<pid>` (opened with truncate), so one reported success for a file it did not
    // write, or the published file mixed both. Now each has its own O_EXCL name: whichever renames last wins,
    // and the file at dst is exactly one of the two packs.
    let root = crate::test_data::fresh_dir("pack-race");
    let (a, b) = (blobs(400, 3000, 0), blobs(300, 5000, 0x5a));
    let (ra, rb) = (root.join("a.trdpack"), root.join("b.trdpack"));
    pack(&a, &ra, &cfg(2, 65536, &[]), &never_cancel).unwrap();
    pack(&b, &rb, &cfg(2, 65536, &[]), &never_cancel).unwrap();
    let (want_a, want_b) = (fs::read(&ra).unwrap(), fs::read(&rb).unwrap());
    let dst = root.join("shared.trdpack");
    for round in 0..8 {
        std::thread::scope(|s| {
            let ha = s.spawn(|| pack(&a, &dst, &cfg(2, 65536, &[]), &never_cancel));
            let hb = s.spawn(|| pack(&b, &dst, &cfg(2, 65536, &[]), &never_cancel));
            let (sa, sb) = (ha.join().unwrap().unwrap(), hb.join().unwrap().unwrap());
            assert_eq!((sa.records, sb.records), (400, 300));
        });
        let got = fs::read(&dst).unwrap();
        assert!(got == want_a || got == want_b, "round {round}: dst is neither pack ({} bytes)", got.len());
        PackedIndex::open(&dst).unwrap();
        let left: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(left.is_empty(), "round {round}: temporaries left: {left:?}");
    }
}

#[test]
fn a_live_writers_temporary_is_never_cleaned_whatever_its_pid() {
    // Before: a temp file was stale when /proc/<pid> did not exist — in another PID namespace (a container) a live
    // writer's PID is not in ours, so its file was deleted under it. Now the writer's lock says it is alive.
    let root = crate::test_data::fresh_dir("pack-stale");
    let ds = blobs(10, 100, 1);
    let dst = root.join("d.trdpack");
    let live = temp_path(&dst, u32::MAX - 3, 1); // a PID that does not exist here
    let held = File::create(&live).unwrap();
    held.lock().unwrap(); // as a writer in another PID namespace holds it
    age(&live);
    let young = temp_path(&dst, u32::MAX - 4, 2); // unlocked but fresh: a writer between create and lock
    fs::write(&young, b"x").unwrap();
    let dead = temp_path(&dst, u32::MAX - 5, 3); // unlocked and old: its writer died
    fs::write(&dead, b"x").unwrap();
    age(&dead);
    let mut old_style = dst.as_os_str().to_os_string(); // an older trdata's `<dst>.tmp.<pid>`
    old_style.push(".tmp.4000000");
    let old_style = PathBuf::from(old_style);
    fs::write(&old_style, b"x").unwrap();
    age(&old_style);
    let fifo = temp_path(&dst, u32::MAX - 6, 4); // not a regular file: never opened for writing, never removed
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    pack(&ds, &dst, &cfg(1, 8192, &[]), &never_cancel).unwrap();
    assert!(live.exists(), "a live writer's temporary was removed");
    assert!(young.exists(), "a young temporary was removed");
    assert!(fifo.exists(), "a FIFO was removed");
    assert!(!dead.exists() && !old_style.exists(), "stale temporaries were kept");
    drop(held);
    pack(&ds, &dst, &cfg(1, 8192, &[]), &never_cancel).unwrap();
    assert!(!live.exists(), "once its writer let go (and it is old) it is stale");
}

#[test]
fn destinations_that_are_not_regular_files_are_refused_before_any_work() {
    // Before: a device node or FIFO at dst was replaced by a regular file, and "", "/" or a directory failed only
    // after the whole pack was written. The dataset's files do not exist, so any work would be a DecodeError.
    let root = crate::test_data::fresh_dir("pack-dst");
    let ds = file_list(vec![root.join("missing.jpg")], vec![0]).unwrap();
    let fifo = root.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let dir = root.join("dir");
    fs::create_dir(&dir).unwrap();
    let link_to_dir = root.join("link");
    std::os::unix::fs::symlink(&dir, &link_to_dir).unwrap();
    let file = root.join("plain");
    fs::write(&file, b"x").unwrap();
    let mut cases = vec![
        (PathBuf::from(""), "is empty"),
        (PathBuf::from("/"), "names a directory"),
        (root.join("x/"), "names a directory"),
        (dir.join(".."), "names a directory"),
        (dir.clone(), "is a directory"),
        (link_to_dir, "is a directory"),
        (fifo.clone(), "is a FIFO"),
        (root.join("nope/out.trdpack"), "which cannot be used"),
        (file.join("out.trdpack"), "which is not a directory"),
        (PathBuf::from("/dev/null"), "is a character device"),
    ];
    // A device node of our own (root may make one): what `trdata pack SRC /dev/null` would have replaced.
    let dev = root.join("null");
    if std::process::Command::new("mknod")
        .args([dev.as_os_str(), "c".as_ref(), "1".as_ref(), "3".as_ref()])
        .status()
        .is_ok_and(|s| s.success())
    {
        cases.push((dev.clone(), "is a character device"));
    }
    for (dst, why) in cases {
        let called = AtomicBool::new(false);
        let r = pack(&ds, &dst, &cfg(1, 8192, &[]), &|_| {
            called.store(true, Ordering::Relaxed);
            true
        });
        match r {
            Err(TrdataError::Config { parameter, message }) => {
                assert_eq!(parameter, DESTINATION);
                assert!(message.contains(why), "{dst:?}: {message}");
            }
            other => panic!("{dst:?}: expected a ConfigError on path, got {other:?}"),
        }
        assert!(!called.load(Ordering::Relaxed), "{dst:?}: work started");
    }
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    if dev.exists() {
        assert!(fs::metadata(&dev).unwrap().file_type().is_char_device(), "the device node was replaced");
    }
    let left: Vec<_> =
        fs::read_dir(&root).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().contains(".tmp.")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn records_waiting_to_be_written_are_bounded_in_bytes() {
    // Before: a chunk of max(16 × workers, 64) whole records was produced before any was written, whatever
    // their size (64 records of 32 MiB: 2.1 GB). Now producers stop at the byte budget.
    let root = crate::test_data::fresh_dir("pack-budget");
    let record = 256 << 10;
    let ds = blobs(96, record, 9);
    for workers in [1usize, 2, 4] {
        let budget = 1 << 20;
        let s = pack_with_budget(
            &ds,
            &root.join("b.trdpack"),
            &cfg(workers as i128, 1 << 20, &[]),
            budget,
            None,
            &never_cancel,
        )
        .unwrap();
        assert_eq!(s.records, 96);
        let bound = budget + (workers * record) as u64;
        assert!(s.peak_buffered_bytes <= bound, "{workers} workers: peak {} > {bound}", s.peak_buffered_bytes);
        assert!(s.peak_buffered_bytes >= record as u64, "the peak is measured");
    }
    // The same file whatever the budget.
    let small = fs::read(root.join("b.trdpack")).unwrap();
    pack(&ds, &root.join("c.trdpack"), &cfg(3, 1 << 20, &[]), &never_cancel).unwrap();
    assert_eq!(fs::read(root.join("c.trdpack")).unwrap(), small);
}

#[test]
fn class_names_repeat_or_labels_outside_them_are_refused_by_writer_and_reader() {
    let root = crate::test_data::fresh_dir("pack-classes");
    let mut ds = blobs(4, 50, 2); // labels 0..4
    let names = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
    let param = |r: Result<PackSummary>| match r {
        Err(TrdataError::Config { parameter, message }) => format!("{parameter}: {message}"),
        other => panic!("expected a ConfigError, got {other:?}"),
    };
    let dst = root.join("p.trdpack");
    let m = param(pack(&ds, &dst, &cfg(1, 8192, &names(&["a", "b", "a", "c"])), &never_cancel));
    assert!(m.starts_with("classes: has class name \"a\" twice (classes 0 and 2)"), "{m}");
    let m = param(pack(&ds, &dst, &cfg(1, 8192, &names(&["a", "b", "c"])), &never_cancel));
    assert!(m.contains("label 3 at record 3, outside the 3 classes"), "{m}");
    ds.labels[1] = -1;
    let m = param(pack(&ds, &dst, &cfg(1, 8192, &names(&["a", "b", "c", "d"])), &never_cancel));
    assert!(m.contains("label -1 at record 1"), "{m}");
    assert!(!dst.exists());
    // Without class names any label is kept as it is.
    pack(&ds, &dst, &cfg(1, 8192, &[]), &never_cancel).unwrap();
    // The reader refuses such files however they were made (an older writer, a forged file).
    for (classes, labels, want) in [
        (names(&["a", "a"]), vec![0, 1], "class name \"a\" twice"),
        (names(&["a", "b"]), vec![0, 2], "label 2 at record 1"),
    ] {
        let mut w = PackWriter::new(std::io::Cursor::new(Vec::new()), 8192).unwrap();
        for l in labels {
            w.push(b"abc", l, RecordMeta::raw(1, 1, 3)).unwrap();
        }
        let meta = PackMeta { classes, ..PackMeta::default() };
        let bytes = w.finish(&meta).unwrap().0.into_inner();
        let e = PackedIndex::from_bytes(&bytes).unwrap_err();
        assert!(e.contains(want), "{e}");
        let path = root.join("forged.trdpack");
        fs::write(&path, &bytes).unwrap();
        let e = PackedIndex::open(&path).unwrap_err().to_string();
        assert!(e.contains("forged.trdpack") && e.contains(want), "{e}");
    }
}

#[test]
fn a_cancel_after_the_last_record_is_honoured_up_to_publication() {
    // Before: `progress` was last consulted when the last record was written; a cancel (Ctrl-C) that came while
    // the index was written or the file synced (seconds for a large pack) was ignored and the file published,
    // replacing a good one, while Python raised KeyboardInterrupt. Here the cancel arrives right after the last
    // record's progress call, as the Python thread's flag would.
    let root = crate::test_data::fresh_dir("pack-late-cancel");
    let ds = blobs(130, 200, 3);
    let dst = root.join("d.trdpack");
    fs::write(&dst, b"the previous file").unwrap();
    let calls = Mutex::new(Vec::new());
    let e = pack(&ds, &dst, &cfg(3, 8192, &[]), &|done| {
        let mut c = calls.lock().unwrap();
        c.push(done);
        c.iter().filter(|&&d| d == 130).count() < 2
    })
    .unwrap_err();
    assert!(e.to_string().contains("cancelled"), "{e}");
    assert_eq!(fs::read(&dst).unwrap(), b"the previous file", "a cancelled pack replaced dst");
    let left: Vec<_> = fs::read_dir(&root).unwrap().flatten().filter(|e| e.file_name() != "d.trdpack").collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
    // Cancelling at every progress point leaves dst as it was and no temporary.
    let points = calls.lock().unwrap().len();
    for k in 0..points {
        let seen = AtomicUsize::new(0);
        let r = pack(&ds, &dst, &cfg(2, 8192, &[]), &|_| seen.fetch_add(1, Ordering::Relaxed) < k);
        assert!(r.is_err(), "cancel at point {k} ignored");
        assert_eq!(fs::read(&dst).unwrap(), b"the previous file");
        assert_eq!(fs::read_dir(&root).unwrap().count(), 1, "point {k}: a temporary was left");
    }
    pack(&ds, &dst, &cfg(2, 8192, &[]), &never_cancel).unwrap();
    assert_eq!(PackedIndex::open(&dst).unwrap().rows.len(), 130);
}

#[test]
fn a_destination_name_near_name_max_packs() {
    // Before: `<dst>.tmp.<pid>.<16 hex>` added up to 32 bytes to dst's name, so a valid 230-byte name (NAME_MAX
    // is 255) failed with "cannot create the temporary file beside it: File name too long".
    let root = crate::test_data::fresh_dir("pack-long-name");
    let ds = blobs(5, 100, 4);
    for len in [200usize, 223, 224, 230, 255] {
        let dst = root.join("n".repeat(len - 8) + ".trdpack");
        let s = pack(&ds, &dst, &cfg(2, 8192, &[]), &never_cancel).unwrap_or_else(|e| panic!("{len}: {e}"));
        assert_eq!(s.records, 5);
        assert_eq!(PackedIndex::open(&dst).unwrap().rows.len(), 5);
        // Its stale temporaries are still found by the next pack to it.
        let stale = temp_path(&dst, u32::MAX, 5);
        assert!(stale.file_name().unwrap().len() <= NAME_MAX_BYTES);
        fs::write(&stale, b"x").unwrap();
        age(&stale);
        pack(&ds, &dst, &cfg(1, 8192, &[]), &never_cancel).unwrap();
        assert!(!stale.exists(), "{len}: a stale temporary was kept");
    }
    let left: Vec<_> =
        fs::read_dir(&root).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().contains(".tmp.")).collect();
    assert!(left.is_empty(), "{left:?}");
    // A name longer than NAME_MAX is refused before any work, naming `path`.
    let e = pack(&ds, &root.join("n".repeat(256)), &cfg(1, 8192, &[]), &never_cancel).unwrap_err();
    assert!(e.to_string().contains("path"), "{e}");
}

#[test]
fn a_header_claiming_huge_sizes_is_refused_before_the_reencode_buffer() {
    // Before: the re-encode output buffer (3 × target pixels) was allocated from the header's size before the
    // decoder's pixel budget was checked: a ~100-byte PNG claiming 65535×65535 with max_side=65535 allocated and
    // zeroed 12.9 GB (abort under a memory limit). Now a DecodeError TooLarge naming the file, the buffer small.
    let root = crate::test_data::fresh_dir("pack-huge-header");
    let chunk = |t: &[u8], d: &[u8]| {
        let mut c = (d.len() as u32).to_be_bytes().to_vec();
        c.extend_from_slice(t);
        c.extend_from_slice(d);
        // CRC-32 (IEEE, reflected), bit by bit: PNG's chunk checksum.
        let mut crc = !0u32;
        for &b in t.iter().chain(d) {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        c.extend_from_slice(&(!crc).to_be_bytes());
        c
    };
    let mut ihdr = 65535u32.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&65535u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]));
    png.extend(chunk(b"IEND", &[]));
    let p = root.join("huge.png");
    fs::write(&p, &png).unwrap();
    let ds = file_list(vec![p.clone()], vec![0]).unwrap();
    let cfg = PackConfig::new(None, Some(65535), None, Some(1), None, vec![]).unwrap();
    match pack(&ds, &root.join("h.trdpack"), &cfg, &never_cancel) {
        Err(TrdataError::Decode(e)) => {
            assert!(e.error.to_string().contains("pixels"), "{}", e.error);
            assert_eq!((e.path, e.index, e.error.kind), (p, 0, ImageErrorKind::TooLarge));
        }
        other => panic!("expected a DecodeError TooLarge, got {other:?}"),
    }
}

#[test]
fn a_fifo_made_at_the_destination_during_the_pack_is_not_replaced() {
    // Before: dst was checked only before the work; a FIFO (or, as root, a device node) made at dst while the
    // records were written was replaced by the rename, which the check exists to prevent.
    let root = crate::test_data::fresh_dir("pack-dst-late");
    let ds = blobs(70, 100, 6);
    let dst = root.join("d.trdpack");
    let made = AtomicBool::new(false);
    let e = pack(&ds, &dst, &cfg(2, 8192, &[]), &|_| {
        if !made.swap(true, Ordering::Relaxed) {
            assert!(std::process::Command::new("mkfifo").arg(&dst).status().unwrap().success());
        }
        true
    })
    .unwrap_err();
    assert!(e.to_string().contains("FIFO"), "{e}");
    assert!(fs::symlink_metadata(&dst).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    assert_eq!(fs::read_dir(&root).unwrap().count(), 1, "a temporary was left");
}

#[test]
fn a_users_own_files_beside_dst_are_never_taken_for_stale_temporaries() {
    // Before: any `<dst>.tmp.*` regular file, unlocked and older than a minute, was removed by the next pack to
    // dst: `trdata pack SRC data` deleted a user's `data.tmp.backup` without a word. Only the names trdata
    // writes are candidates now.
    let root = crate::test_data::fresh_dir("pack-user-files");
    let ds = blobs(3, 50, 8);
    let dst = root.join("data");
    let mine = [
        "data.tmp.backup",
        "data.tmp.notes.txt",
        "data.tmp.12.notes",
        "data.tmp.12.00000000000000fg",
        "data.tmp.12.00000000000000FF",
        "data.tmp.12.000000000000000ff",
        "data.tmp.99999999999",
        "data.tmp.-1",
        "data.tmp.+1",
        "data.tmp.",
    ];
    for m in mine {
        fs::write(root.join(m), b"precious").unwrap();
        age(&root.join(m));
    }
    let theirs = [temp_path(&dst, 12, 0xff), root.join("data.tmp.4000000")];
    for t in &theirs {
        fs::write(t, b"x").unwrap();
        age(t);
    }
    pack(&ds, &dst, &cfg(1, 8192, &[]), &never_cancel).unwrap();
    for m in mine {
        assert_eq!(fs::read(root.join(m)).unwrap(), b"precious", "{m} was removed");
    }
    for t in &theirs {
        assert!(!t.exists(), "{t:?}: a stale temporary was kept");
    }
}
