//! Tests of the pack tooling: real ImageFolder-layout trees written here, packed, read back byte for byte; the
//! atomic publication under errors and cancels; re-encoding; verification; and loaders over packed files
//! (the same batches as over the source, exactly once per epoch in partial mode, exact resume).

use super::*;
use crate::augment::{DType, Layout, OutputSpec, SamplePipeline, TransformSpec};
use crate::config::LoaderConfig;
use crate::decode::DecodeLimits;
use crate::loader::{BatchImages, Loader, NextStep};
use crate::plan::LastBatch;
use crate::source::{PackedFile, PackedMode, file_list, packed_dataset};
use crate::sync::Arc;
use crate::topology::PinMode;
use crate::worker::ErrorPolicy;
use std::time::Duration;

fn jpeg(seed: u32, w: u32, h: u32, sub: ChromaSubsampling) -> Vec<u8> {
    let c = sub.input_channels() as u32;
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
    let subs = [ChromaSubsampling::S420, ChromaSubsampling::S444, ChromaSubsampling::Gray, ChromaSubsampling::S422];
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

fn never_cancel(_: u64) -> bool {
    true
}

fn files(ds: &Dataset) -> &[PathBuf] {
    match &ds.store {
        Store::Files(p) => p,
        _ => unreachable!(),
    }
}

#[test]
fn packing_keeps_the_source_bytes_order_labels_and_classes_for_any_thread_count() {
    let (root, mut ds) = image_folder("keep", 40);
    // A damaged file and a PNG-in-disguise among them, as ImageNet has: stored as they are.
    let bad = root.join("class_1/zz_bad.jpg");
    fs::write(&bad, b"this is no image at all").unwrap();
    if let Store::Files(p) = &mut ds.store {
        p.push(bad.clone());
    }
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
    let f = PackedFile::open(&dst, PackedMode::Full, None, None).unwrap();
    let ix = f.index();
    for (i, p) in files(&ds).iter().enumerate() {
        assert_eq!(&*f.record(i, |b| (0, b as u32)).unwrap(), &fs::read(p).unwrap()[..], "record {i}");
        assert_eq!(ix.rows[i].label, ds.labels[i]);
    }
    assert_eq!(ix.meta.classes, ds.classes);
    assert_eq!(ix.meta.options, PackOptions { source: "files".into(), ..PackOptions::default() });
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
    // A temp file of a writer killed earlier (a pid that cannot be alive) is removed by the next pack.
    let stale = temp_path(&dst, u32::MAX - 1);
    fs::write(&stale, [0u8; 4096]).unwrap();
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
    if let Store::Files(p) = &mut ds.store {
        p.truncate(1);
    }
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
    let f = PackedFile::open(&dst, PackedMode::Full, None, None).unwrap();
    let mut dec = Decoder::new().unwrap();
    let mut reference_scratch = WorkerScratch::new().unwrap();
    for (i, p) in files(&ds).iter().enumerate() {
        let src = fs::read(p).unwrap();
        let info = dec.read_header(&src).unwrap();
        let (tw, th) = c.target_size(info.width, info.height);
        let rec = f.record(i, |b| (0, b as u32)).unwrap();
        let got = dec.read_header(&rec).unwrap();
        assert_eq!((got.width, got.height, got.subsampling, got.progressive), (tw, th, Subsampling::S420, false));
        assert_eq!(f.index().rows[i].meta.subsampling, 3);
        // The decoded record is close to the source resized by the same (Pillow-exact) resampler.
        let mut out = Vec::new();
        dec.decode_full_rgb(&rec, &mut out).unwrap();
        let spec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None };
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
    let f = PackedFile::open(&dst, PackedMode::Partial, None, None).unwrap();
    for i in 0..5 {
        assert_eq!(&*f.record(i, |b| (0, b as u32)).unwrap(), &data[i * 36..(i + 1) * 36]);
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
    let spec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, normalize: None };
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
    let full = Arc::new(packed_dataset(&dst, PackedMode::Full, None, None).unwrap());
    let partial = Arc::new(packed_dataset(&dst, PackedMode::Partial, Some(2), Some(3)).unwrap());
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
    // The partial cache stayed bounded: cache_blocks + every worker that ever read (at most 4 at once).
    let Store::Packed(p) = &partial.store else { unreachable!() };
    let cache = p.cache().unwrap();
    assert!(cache.peak_live_blocks() <= 3 + 4, "peak {}", cache.peak_live_blocks());
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
        let ds = packed_dataset(&dst, mode, None, None).unwrap();
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
