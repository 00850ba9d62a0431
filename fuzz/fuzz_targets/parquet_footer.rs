//! The Parquet reader's parsers (source/parquet/) on hostile bytes: the footer (our thrift walk of its schema
//! nesting and counts, then the `parquet` crate's decoder, which we call under `catch_unwind`), the page-header
//! walk, and the `huggingface` metadata JSON. The first byte picks the input's reading:
//! - 0: the bytes are a whole file (magic, footer length, footer);
//! - 1: the bytes are a footer, framed as a file here so the thrift walk and the decoder are reached;
//! - 2: the bytes are a run of page headers, walked as the decoder walks a column chunk;
//! - 3: the bytes are a `huggingface` JSON text.
//! Nothing may panic or recurse without bound; a footer that decodes holds no more row groups and schema elements
//! than the limits allow. The whole read path (open and every unit's decode over real files with flipped and
//! truncated bytes) runs as a proptest in the crate (src/source/parquet/tests.rs), where cargo-fuzz is not
//! installed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::source::parquet::{
    MAX_ROW_GROUPS, MAX_SCHEMA_ELEMENTS, class_names, decode_footer_bytes, thrift::page_header,
};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 4 {
        0 | 1 => {
            let file = if mode % 4 == 0 {
                rest.to_vec()
            } else {
                let mut f = b"PAR1".to_vec();
                f.extend_from_slice(rest);
                f.extend_from_slice(&(rest.len() as u32).to_le_bytes());
                f.extend_from_slice(b"PAR1");
                f
            };
            if let Ok(md) = decode_footer_bytes(&file) {
                assert!(md.num_row_groups() as u64 <= MAX_ROW_GROUPS);
                assert!(md.file_metadata().schema_descr().num_columns() as u64 <= MAX_SCHEMA_ELEMENTS);
            }
        }
        2 => {
            let mut at = 0usize;
            while at < rest.len() {
                let Ok(h) = page_header(&rest[at..]) else { break };
                assert!(h.header_len as usize <= rest.len() - at && h.header_len > 0);
                let Ok(body) = usize::try_from(h.compressed) else { break };
                at = at.saturating_add(h.header_len as usize).saturating_add(body);
            }
        }
        _ => {
            if let Ok(Some(names)) = class_names(rest, "label") {
                assert!(names.iter().map(|n| n.len()).sum::<usize>() <= rest.len());
            }
        }
    }
});
