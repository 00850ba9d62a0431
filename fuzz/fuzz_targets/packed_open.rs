//! The packed-file parser (source/packed.rs) on hostile bytes: the header, the index, the blocks table and the
//! metadata JSON. Three kinds of input, chosen by the first byte:
//! - raw: the bytes are a whole file (finds what a foreign or truncated file does);
//! - built: a valid pack is written from the input (records, labels, class names taken from it), then byte
//!   mutations from the input are applied and — for half of the inputs — the CRCs are recomputed (`reseal`), so
//!   the structural checks behind the CRCs are reached, which random bytes never would;
//! - json: the bytes are a metadata section.
//! Half of the built packs carry extras (version 2: the extras index and entries after the metadata).
//! Nothing may panic, and whatever parses must be consistent: every record inside its block, every block inside
//! the data region, the block of each record found by `block_of`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::io::Cursor;
use std::os::unix::ffi::OsStringExt;
use trdata::source::packed_extras::{ExtraKind, decode_record};
use trdata::source::packed::{
    HEADER_BYTES, PackMeta, PackOptions, PackWriter, PackedIndex, RecordFormat, RecordMeta, reseal,
};

fn built(data: &[u8]) -> Option<Vec<u8>> {
    let (&n, rest) = data.split_first()?;
    let (&split, rest) = rest.split_first()?;
    let records = usize::from(n % 12) + 1;
    let cut = (usize::from(split) * 16).min(rest.len());
    let (payload, mutations) = rest.split_at(cut);
    let mut w = PackWriter::new(Cursor::new(Vec::new()), 4096).ok()?;
    for i in 0..records {
        // Record i: a slice of the payload (at least one byte), sometimes a raw image whose size matches.
        let start = (i * 37) % payload.len().max(1);
        let len = (usize::from(payload.get(i).copied().unwrap_or(1)) * 23 % 5000).max(1);
        let mut bytes: Vec<u8> = payload.iter().cycle().skip(start).take(len).copied().collect();
        if bytes.is_empty() {
            bytes.push(i as u8);
        }
        let meta = if i % 3 == 0 {
            let side = ((bytes.len() as f64).sqrt() as usize).max(1);
            bytes.truncate(side * side);
            RecordMeta::raw(side as u16, side as u16, 1)
        } else {
            RecordMeta { width: 1, height: 1, format: RecordFormat::Jpeg, subsampling: 3, flags: 0, channels: 3 }
        };
        w.push(&bytes, i as i64 - 3, meta).ok()?;
        if i % 2 == 1 {
            // extras (version 2): a caption and, for some records, a second field, taken from the payload
            let mut extras = vec![("txt".to_string(), ExtraKind::Text, bytes[..bytes.len().min(40)].to_vec())];
            if i % 4 == 1 {
                extras.push((format!("f{}", i % 3), ExtraKind::Npy, bytes.iter().rev().take(9).copied().collect()));
            }
            w.push_extras(&extras).ok()?;
        }
    }
    let classes = payload.chunks(7).take(5).map(|c| OsString::from_vec(c.to_vec())).collect();
    let options = PackOptions { source: "fuzz".into(), ..PackOptions::default() };
    let meta = PackMeta { classes, options, extras: Vec::new() };
    let mut file = w.finish(&meta).ok()?.0.into_inner();
    // Mutations: (position, xor) pairs, positions mostly in the header and the sections at the end.
    let tail = file.len() - (file.len() - HEADER_BYTES as usize).min(8192);
    for m in mutations.chunks_exact(3) {
        let pos = usize::from(u16::from_le_bytes([m[0], m[1]]));
        let at = if pos % 2 == 0 { pos % 160 } else { tail + pos % (file.len() - tail) };
        file[at] ^= m[2];
    }
    if split % 2 == 0 {
        reseal(&mut file);
    }
    Some(file)
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else { return };
    let file = match kind % 3 {
        0 => rest.to_vec(),
        1 => match built(rest) {
            Some(f) => f,
            None => return,
        },
        _ => {
            let _ = PackMeta::from_json(rest);
            return;
        }
    };
    if let Ok(ix) = PackedIndex::from_bytes(&file) {
        let data_end = HEADER_BYTES + ix.header.data_bytes;
        assert_eq!(ix.rows.len() as u64, ix.header.records);
        for (i, r) in ix.rows.iter().enumerate() {
            let b = ix.blocks[ix.block_of(i)];
            assert!(r.offset >= b.offset && r.offset + u64::from(r.len) <= b.offset + b.bytes);
            assert!(b.offset + b.bytes <= data_end && data_end <= file.len() as u64);
        }
        if let Some(e) = &ix.extras {
            // every record's extras lie inside the file; the entry parser takes whatever they hold
            for r in &e.rows {
                let end = r.offset + u64::from(r.len);
                assert!(end <= file.len() as u64);
                let _ = decode_record(&file[r.offset as usize..end as usize], e.names.len());
            }
        }
    }
});
