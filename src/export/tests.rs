//! Protocol tests of the export layer (no Python): layouts, ownership, deleters on other threads, the
//! stream hook's order, request decoding, and leases returning to the station only after every export.

use super::dlpack::*;
use super::*;
use crate::staging::BatchLayout;
use crate::stats::Stats;
use crate::transfer::{BatchLease, EpochShape, Station, Take};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Log = Arc<Mutex<Vec<String>>>;

fn log_of(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// Test owner: 64 bytes (8-byte aligned) that logs its drop.
struct Probe {
    words: Box<[u64; 8]>,
    log: Log,
}

impl Probe {
    fn new(log: &Log) -> Self {
        Self { words: Box::new([0; 8]), log: Arc::clone(log) }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.log.lock().unwrap().push("owner dropped".into());
    }
}

// SAFETY: the boxed array is owned, non-null, never reallocated; drop only logs and frees.
unsafe impl ExportOwner for Probe {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn data_ptr(&self) -> *mut c_void {
        self.words.as_ptr().cast_mut().cast()
    }
    fn len_bytes(&self) -> usize {
        64
    }
}

#[test]
fn contiguous_strides_and_dtype_codes() {
    let log = Log::default();
    let e = TensorExport::new(Probe::new(&log), ElementType::F32, &[2, 2, 4], None).unwrap();
    assert_eq!(e.shape(), &[2, 2, 4]);
    assert_eq!(e.strides(), &[8, 4, 1]);
    let m = ManagedTensor::new(e, true).unwrap();
    let t = m.dl_tensor();
    assert_eq!(t.ndim, 3);
    assert_eq!(t.dtype, DLDataType { code: KDL_FLOAT, bits: 32, lanes: 1 });
    assert_eq!(t.device, DLDevice { device_type: KDL_CPU, device_id: 0 });
    assert!(!t.strides.is_null());
    // SAFETY: the managed tensor is alive and has ndim = 3 shape and stride entries.
    let (shape, strides) =
        unsafe { (std::slice::from_raw_parts(t.shape, 3), std::slice::from_raw_parts(t.strides, 3)) };
    assert_eq!((shape, strides), (&[2i64, 2, 4][..], &[8i64, 4, 1][..]));
    let (version, flags) = m.version_and_flags().unwrap();
    assert_eq!(version, DLPackVersion { major: 1, minor: 0 });
    assert_eq!(flags, 0);
    assert_eq!(m.capsule_name(), c"dltensor_versioned");
    for (ty, code, bits) in [
        (ElementType::U8, KDL_UINT, 8),
        (ElementType::F16, KDL_FLOAT, 16),
        (ElementType::BF16, KDL_BFLOAT, 16),
        (ElementType::I64, KDL_INT, 64),
    ] {
        assert_eq!(ty.dl(), DLDataType { code, bits, lanes: 1 });
    }
}

#[test]
fn views_outside_the_owner_or_misaligned_are_refused() {
    let log = Log::default();
    assert!(TensorExport::new(Probe::new(&log), ElementType::F32, &[17], None).is_err());
    assert!(TensorExport::new(Probe::new(&log), ElementType::F32, &[16], None).is_ok());
    assert!(TensorExport::new(Probe::new(&log), ElementType::U8, &[2, 2], Some(&[63, 1])).is_err());
    assert!(TensorExport::new(Probe::new(&log), ElementType::U8, &[2, 2], Some(&[-1, 1])).is_err());
    assert!(TensorExport::new(Probe::new(&log), ElementType::U8, &[2], Some(&[1, 1])).is_err());
    assert!(
        TensorExport::new(Probe::new(&log), ElementType::I64, &[0, 100], None).is_ok(),
        "empty views reach nothing"
    );
    // Every export, refused or dropped unused, dropped its owner (no leak on the error path).
    assert_eq!(log_of(&log).len(), 6);
}

#[test]
fn legacy_tensor_deleter_drops_the_owner_once_on_another_thread() {
    let log = Log::default();
    let e = TensorExport::new(Probe::new(&log), ElementType::U8, &[64], None).unwrap();
    let m = ManagedTensor::new(e, false).unwrap();
    assert!(m.version_and_flags().is_none());
    assert_eq!(m.capsule_name(), c"dltensor");
    let raw = m.into_raw() as usize;
    assert!(log_of(&log).is_empty(), "released to a consumer, not freed");
    std::thread::spawn(move || {
        let p = raw as *mut DLManagedTensor;
        // SAFETY: `p` came from into_raw of a legacy tensor and this is its only deletion (what a consumer
        // does when its tensor dies on some other thread).
        unsafe { ((*p).deleter.unwrap())(p) };
    })
    .join()
    .unwrap();
    assert_eq!(log_of(&log), ["owner dropped"]);
}

#[test]
fn dropping_an_unconsumed_managed_tensor_frees_it() {
    let log = Log::default();
    for versioned in [false, true] {
        let e = TensorExport::new(Probe::new(&log), ElementType::U8, &[8, 8], None).unwrap();
        drop(ManagedTensor::new(e, versioned).unwrap());
    }
    assert_eq!(log_of(&log), ["owner dropped", "owner dropped"]);
}

#[test]
fn host_copy_is_private_and_flagged() {
    let log = Log::default();
    let mut p = Probe::new(&log);
    p.words.iter_mut().enumerate().for_each(|(i, w)| *w = i as u64 * 3);
    let src = p.words.as_ptr() as usize;
    let e = TensorExport::new(p, ElementType::I64, &[2, 4], None).unwrap();
    let c = e.host_copy().unwrap();
    drop(e);
    assert_eq!(log_of(&log), ["owner dropped"], "the copy does not keep the original alive");
    let m = ManagedTensor::new(c, true).unwrap();
    assert_eq!(m.version_and_flags().unwrap().1 & FLAG_IS_COPIED, FLAG_IS_COPIED);
    let t = m.dl_tensor();
    assert_ne!(t.data as usize, src);
    // SAFETY: the copy holds 8 i64 values and lives as long as `m`.
    let vals = unsafe { std::slice::from_raw_parts(t.data.cast::<i64>(), 8) };
    assert_eq!(vals, &[0, 3, 6, 9, 12, 15, 18, 21]);
}

/// Records the hook calls, and the owner's drop, in one log (to check their order).
struct RecordingOrder {
    log: Log,
    fail: bool,
}

impl StreamOrder for RecordingOrder {
    fn consumer_waits(&self, stream: ConsumerStream) -> Result<(), ExportError> {
        self.log.lock().unwrap().push(format!("wait {stream:?}"));
        if self.fail { Err(ExportError::StreamOrder("event gone".into())) } else { Ok(()) }
    }
    fn consumer_released(&self, stream: ConsumerStream) {
        self.log.lock().unwrap().push(format!("released {stream:?}"));
    }
}

#[test]
fn stream_hook_waits_at_export_and_records_before_the_owner_goes() {
    let log = Log::default();
    let order = Arc::new(RecordingOrder { log: Arc::clone(&log), fail: false });
    let stream = ConsumerStream::parse(Device::Cuda(0), Some(0x7f00)).unwrap();
    let e = TensorExport::new(Probe::new(&log), ElementType::U8, &[64], None).unwrap().with_stream_order(order, stream);
    let m = ManagedTensor::new(e, true).unwrap();
    assert_eq!(log_of(&log), ["wait Cuda(32512)"]);
    let raw = m.into_raw() as usize;
    std::thread::spawn(move || {
        let p = raw as *mut DLManagedTensorVersioned;
        // SAFETY: only deletion of a tensor released by into_raw.
        unsafe { ((*p).deleter.unwrap())(p) };
    })
    .join()
    .unwrap();
    assert_eq!(log_of(&log), ["wait Cuda(32512)", "released Cuda(32512)", "owner dropped"]);

    // A failing wait makes no tensor; the owner goes, and nothing is "released" (no consumer existed).
    let log = Log::default();
    let order = Arc::new(RecordingOrder { log: Arc::clone(&log), fail: true });
    let e = TensorExport::new(Probe::new(&log), ElementType::U8, &[64], None)
        .unwrap()
        .with_stream_order(order, ConsumerStream::CudaLegacyDefault);
    assert!(matches!(ManagedTensor::new(e, false), Err(ExportError::StreamOrder(_))));
    assert_eq!(log_of(&log), ["wait CudaLegacyDefault", "owner dropped"]);
}

#[test]
fn request_decoding_follows_the_array_api() {
    let cpu = |r: DlpackRequest| r.plan(Device::Cpu);
    let plan = cpu(DlpackRequest::default()).unwrap();
    assert_eq!(plan, ExportPlan { versioned: false, copy: false, stream: ConsumerStream::Host });
    assert!(cpu(DlpackRequest { max_version: Some((1, 0)), ..Default::default() }).unwrap().versioned);
    assert!(cpu(DlpackRequest { max_version: Some((1, 7)), ..Default::default() }).unwrap().versioned);
    assert!(!cpu(DlpackRequest { max_version: Some((0, 8)), ..Default::default() }).unwrap().versioned);
    assert!(cpu(DlpackRequest { copy: Some(true), ..Default::default() }).unwrap().copy);
    assert!(!cpu(DlpackRequest { copy: Some(false), ..Default::default() }).unwrap().copy);
    assert!(cpu(DlpackRequest { dl_device: Some((1, 0)), ..Default::default() }).is_ok());
    assert!(matches!(
        cpu(DlpackRequest { dl_device: Some((2, 0)), ..Default::default() }),
        Err(ExportError::Device { .. })
    ));
    assert_eq!(
        cpu(DlpackRequest { stream: Some(-1), ..Default::default() }).unwrap().stream,
        ConsumerStream::Unsynchronized
    );
    assert!(matches!(cpu(DlpackRequest { stream: Some(1), ..Default::default() }), Err(ExportError::Stream(_))));

    let cuda = |s: Option<i64>| ConsumerStream::parse(Device::Cuda(1), s);
    assert_eq!(cuda(None).unwrap(), ConsumerStream::CudaLegacyDefault);
    assert_eq!(cuda(Some(1)).unwrap(), ConsumerStream::CudaLegacyDefault);
    assert_eq!(cuda(Some(2)).unwrap(), ConsumerStream::CudaPerThreadDefault);
    assert_eq!(cuda(Some(-1)).unwrap(), ConsumerStream::Unsynchronized);
    assert!(cuda(Some(0)).is_err() && cuda(Some(-5)).is_err());
    let on_cuda = DlpackRequest { copy: Some(true), ..Default::default() }.plan(Device::Cuda(1));
    assert!(matches!(on_cuda, Err(ExportError::CopyUnsupported(_))));
    let dev = DlpackRequest { dl_device: Some((2, 1)), ..Default::default() }.plan(Device::Cuda(1)).unwrap();
    assert_eq!(dev.stream, ConsumerStream::CudaLegacyDefault);
}

/// One-row batches of 4 bytes in a 2-slot, 2-buffer station.
fn station() -> Arc<Station> {
    let st = Arc::new(Station::new(BatchLayout::new(1, 4), 2, 2, Arc::new(Stats::default())));
    st.begin_epoch(EpochShape { batches: 4, batch_size: 1, total_rows: 4 }, 0);
    st
}

fn fill(st: &Station, b: u64) {
    let buf = st.acquire(b).unwrap();
    buf.claim_row(0).image(0).fill(b as u8 + 1);
    drop(buf);
    st.complete(b, None);
}

fn take(st: &Arc<Station>, b: u64) -> Take {
    Station::take(st, b, Duration::from_millis(20))
}

#[test]
fn lease_returns_only_after_the_handle_and_every_export_died() {
    let st = station();
    fill(&st, 0);
    fill(&st, 1);
    let Take::Ready(l0, None) = take(&st, 0) else { panic!("batch 0") };
    let handle: Arc<BatchLease> = Arc::new(l0);
    let exports: Vec<ManagedTensor> = (0..2)
        .map(|i| {
            let e = TensorExport::new(Arc::clone(&handle), ElementType::U8, &[1, 4], None).unwrap();
            ManagedTensor::new(e, i == 0).unwrap()
        })
        .collect();
    // SAFETY: the first export is alive and holds 4 bytes.
    assert_eq!(unsafe { std::slice::from_raw_parts(exports[0].dl_tensor().data.cast::<u8>(), 4) }, &[1; 4]);
    drop(handle); // the Python handle dies first; the consumer tensors keep the buffer
    let Take::Ready(_l1, None) = take(&st, 1) else { panic!("batch 1") };
    assert!(matches!(take(&st, 2), Take::AllBuffersHeld { held: 2 }), "batch 0's buffer must still be out");

    let mut exports = exports.into_iter();
    let first = exports.next().unwrap().into_raw() as usize;
    drop(exports); // the second export dies here; the first (versioned) one still holds the lease
    assert!(matches!(take(&st, 2), Take::AllBuffersHeld { .. }));
    std::thread::spawn(move || {
        let p = first as *mut DLManagedTensorVersioned;
        // SAFETY: only deletion of a tensor released by into_raw; dropped off the producer's thread.
        unsafe { ((*p).deleter.unwrap())(p) };
    })
    .join()
    .unwrap();
    // The buffer is back: batch 2 can be written and taken.
    fill(&st, 2);
    assert!(matches!(take(&st, 2), Take::Ready(_, None)));
}
