//! The pack writer's destination handling (pack/mod.rs: `check_destination`, the O_EXCL + flock temporary, the
//! publication, the stale-temporary cleaner) on hostile paths. A sandbox folder holds one of each kind of thing
//! a destination may name — a regular file, a folder, a FIFO, a socket-less stand-in (a symlink to /dev/null), a
//! symlink to the folder, a dangling symlink, stale and live temporaries — and the input builds a path from
//! those names, `.`, `..`, `""`, raw bytes and a trailing `/`, relative to the sandbox or absolute. Each input
//! packs a one-record dataset to that path. Whatever happens:
//! - nothing panics;
//! - a destination that is (through links) a folder, a FIFO or a device is refused, and is still what it was;
//! - no temporary file is left in the sandbox, and the live (locked) temporary is never removed;
//! - a success leaves a regular file at the path that opens as a pack (then the sandbox is restored).
//!
//! Paths that would leave the sandbox lexically are skipped (the fuzzer must not write elsewhere); symlinks in the
//! sandbox only point at the sandbox's own folder and at /dev/null (which a pack must refuse).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use trdata::pack::{PackConfig, pack};
use trdata::source::packed::PackedIndex;
use trdata::source::{Dataset, bytes};

struct Sandbox {
    root: PathBuf,
    /// Held for the whole run: the live writer's temporary must survive every cleaner.
    _live: File,
    live: PathBuf,
    ds: Dataset,
    cfg: PackConfig,
}

const NAMES: [&str; 12] =
    ["file", "dir", "fifo", "null", "link_dir", "dangling", ".", "..", "", "new", "dir/new", "file.tmp.1"];

fn sandbox() -> &'static Sandbox {
    static S: OnceLock<Sandbox> = OnceLock::new();
    S.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("trdata-fuzz-dst-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("dir")).unwrap();
        reset(&root);
        assert!(std::process::Command::new("mkfifo").arg(root.join("fifo")).status().unwrap().success());
        std::os::unix::fs::symlink("/dev/null", root.join("null")).unwrap();
        std::os::unix::fs::symlink(root.join("dir"), root.join("link_dir")).unwrap();
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        // A live writer's temporary (locked, old, a PID from another namespace) and its destination's name.
        let live = root.join("new.tmp.4000000000.00000000deadbeef");
        let file = File::create(&live).unwrap();
        file.lock().unwrap();
        file.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        let ds = bytes(vec![b"not an image, stored as it is".to_vec()], vec![0]).unwrap();
        let cfg = PackConfig::new(None, None, None, Some(1), None, vec![]).unwrap();
        Sandbox { root, _live: file, live, ds, cfg }
    })
}

/// The regular file fixture, as it was.
fn reset(root: &Path) {
    fs::write(root.join("file"), b"precious").unwrap();
}

/// Every `.tmp.` entry under `dir` except the live one.
fn temporaries(dir: &Path, live: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            temporaries(&p, live, out);
        } else if e.file_name().to_string_lossy().contains(".tmp.") && p != live && !p.ends_with("file.tmp.1") {
            out.push(p);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let s = sandbox();
    let Some((&head, rest)) = data.split_first() else { return };
    // Build the path under the sandbox: components chosen by bytes, raw components from runs of bytes, a
    // trailing slash maybe. (Relative paths would resolve against the fuzzer's working directory.)
    let mut text = Vec::new();
    let mut depth = 0i32;
    for chunk in rest.chunks(3).take(6) {
        let comp: Vec<u8> = if chunk[0] < 200 {
            NAMES[usize::from(chunk[0]) % NAMES.len()].as_bytes().to_vec()
        } else {
            chunk[1..].iter().copied().filter(|&b| b != 0 && b != b'/').collect()
        };
        match &comp[..] {
            b".." => depth -= 1,
            b"." | b"" => {}
            _ => depth += 1 + comp.iter().filter(|&&b| b == b'/').count() as i32,
        }
        if depth < 0 {
            return; // would leave the sandbox
        }
        if !text.is_empty() {
            text.push(b'/');
        }
        text.extend_from_slice(&comp);
    }
    if head & 1 == 1 {
        text.push(b'/');
    }
    let path = s.root.join(OsString::from_vec(text));
    let before = fs::metadata(&path).ok().map(|m| m.file_type());
    let r = pack(&s.ds, &path, &s.cfg, &|_| true);
    if let Some(ft) = before {
        if ft.is_dir() || ft.is_fifo() || ft.is_char_device() || ft.is_block_device() || ft.is_socket() {
            assert!(r.is_err(), "{path:?} ({ft:?}) was accepted");
            let after = fs::metadata(&path).unwrap().file_type();
            assert_eq!(after, ft, "{path:?} changed kind");
        }
    }
    assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    assert!(fs::metadata(s.root.join("fifo")).unwrap().file_type().is_fifo());
    assert!(s.live.exists(), "the live writer's temporary was removed");
    let mut left = Vec::new();
    temporaries(&s.root, &s.live, &mut left);
    assert!(left.is_empty(), "{path:?}: temporaries left: {left:?}");
    if r.is_ok() {
        assert!(fs::symlink_metadata(&path).unwrap().is_file(), "{path:?}: no regular file published");
        PackedIndex::open(&path).unwrap();
        let _ = fs::remove_file(&path);
        restore(&s.root);
    }
});

/// Put back the fixtures a successful pack replaced (the regular file, a symlink replaced by the pack).
fn restore(root: &Path) {
    reset(root);
    for (name, target) in
        [("null", PathBuf::from("/dev/null")), ("link_dir", root.join("dir")), ("dangling", root.join("nowhere"))]
    {
        let p = root.join(name);
        if !fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            let _ = fs::remove_file(&p);
            std::os::unix::fs::symlink(target, &p).unwrap();
        }
    }
}
