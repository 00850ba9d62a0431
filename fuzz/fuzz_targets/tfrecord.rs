//! The TFRecord reader (source/tfrecord.rs) on hostile bytes: the framing and the `tf.train.Example` decode (prost). Two
//! kinds of input, chosen by the first byte:
//! - raw (even): the bytes are a whole file, indexed, every record read and parsed;
//! - framed (odd): the bytes are split into records at the positions the second byte gives, each framed with valid
//!   CRCs, so the Example decode is reached through the framing, which random bytes never would.
//! Nothing may panic; an index must tile the file exactly (records back to back, the last ending at its end); a
//! parse keeps at most one byte per input byte (names, bytes values, one per number) and its value count is within
//! the limits. The same properties run as proptests in the crate (src/source/tfrecord.rs) where cargo-fuzz is not
//! installed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::source::tfrecord::{
    Example, FRAME_BYTES, Feature, HEAD_BYTES, Limits, frame_record, index_bytes, parse_example,
    slice_reader,
};

fn kept(ex: &Example) -> usize {
    let values = |f: &Feature| match f {
        Feature::Bytes(v) => v.iter().map(|b| b.len().max(1)).sum(),
        Feature::Int64(v) => v.len(),
        Feature::Float(v) => v.len(),
        Feature::Unset => 0,
    };
    ex.features.iter().map(|(k, f)| k.len() + values(f)).sum()
}

fn frame(records: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    records.iter().for_each(|r| frame_record(r, &mut out));
    out
}

fn check_file(file: &[u8], limits: &Limits) {
    let Ok(ix) = index_bytes(file, limits) else { return };
    let mut at = 0u64;
    for &(o, n) in &ix.offsets {
        assert_eq!(o, at + HEAD_BYTES);
        at = o + u64::from(n) + 4;
    }
    assert_eq!(at, file.len() as u64);
    assert!(ix.offsets.len() as u64 <= file.len() as u64 / FRAME_BYTES);
    let mut read = slice_reader(file);
    for i in 0..ix.offsets.len() {
        if let Ok(data) = ix.read(&mut read, i).unwrap() {
            check_example(&data, limits);
        }
    }
}

fn check_example(data: &[u8], limits: &Limits) {
    if let Ok(ex) = parse_example(data, limits) {
        assert!(kept(&ex) <= data.len());
        assert!(ex.features.len() <= limits.max_features);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let limits = Limits { max_features: 64, max_values: 256, ..Limits::default() };
    if mode % 2 == 0 {
        check_file(rest, &limits);
        check_example(rest, &limits);
    } else {
        let Some((&split, rest)) = rest.split_first() else { return };
        let cut = (usize::from(split) * 4).min(rest.len());
        let (a, b) = rest.split_at(cut);
        let file = frame(&[a, b]);
        check_file(&file, &limits);
        check_file(&file[..file.len() - usize::from(mode >> 1) % file.len()], &limits);
    }
});
