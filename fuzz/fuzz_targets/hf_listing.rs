//! The Hugging Face Hub's answers (src/storage/hf/) on hostile bytes: a tree API page, the revision API's object,
//! a Link header, and the first bytes as an hf:// pattern's path against the rest as a listed path. Nothing may
//! panic; a page that parses keeps at most the entries asked for, each path a valid repository path and each file
//! with a size. The same properties run as proptests in the crate (src/storage/hf/tests.rs) where cargo-fuzz is
//! not installed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::storage::hf::{HfPattern, glob_match, next_link, parse_revision, parse_tree_page};

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = parse_tree_page(data, 64) {
        assert!(entries.len() <= 64);
        for e in &entries {
            assert!(!e.path.is_empty() && !e.path.starts_with('/'));
            assert!(e.path.split('/').all(|s| !s.is_empty() && s != "." && s != ".."));
            assert!(!e.is_file || e.size.is_some());
        }
    }
    let _ = parse_revision(data);
    let text = String::from_utf8_lossy(data);
    let _ = next_link(&text);
    let _ = HfPattern::parse("fuzz", &format!("hf://datasets/{text}"));
    if let Some((pattern, path)) = text.split_once('\n') {
        let _ = glob_match(pattern, path);
    }
});
