//! The disk cache on real files in a scratch folder: several `DiskCache`s over one folder stand for several
//! processes (each has its own `state` descriptor, so their flocks exclude each other as two processes' do).

use super::*;
use proptest::prelude::*;
use std::sync::Arc;

/// A fresh folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trdata-disk-cache-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn key(object: &str, version: &str, offset: u64, len: u64) -> BlockKey {
    BlockKey { object: object.into(), version: version.into(), object_bytes: 1 << 40, offset, len }
}

/// The block's bytes: different for every (object, version, offset), so a wrong entry never looks right.
fn block(k: &BlockKey) -> Vec<u8> {
    let seed = fnv64(&[&k.object, &k.version, &k.offset.to_le_bytes()]);
    (0..k.len).map(|i| (seed.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 56) as u8).collect()
}

fn entry_path(c: &DiskCache, k: &BlockKey) -> PathBuf {
    c.root().join(k.version_dir()).join(k.entry_name())
}

/// Bytes an entry of `len` payload bytes takes for `key` (header + payload).
fn entry_bytes(k: &BlockKey) -> u64 {
    (FIXED_HEADER_BYTES + k.object.len() + k.version.len()) as u64 + k.len
}

const KIB: u64 = 1024;

#[test]
fn a_block_comes_back_byte_identical_also_after_a_restart() {
    let dir = scratch("roundtrip");
    let k = key("s3://b/train.trd", "etag:\"1\"", 4096, 300 * KIB);
    {
        let c = DiskCache::open(&dir, 16 << 20).unwrap();
        assert_eq!(c.get(&k), None);
        c.put(&k, &block(&k));
        assert_eq!(c.get(&k).as_deref(), Some(&block(&k)[..]));
        let s = c.stats();
        assert_eq!((s.disk_hits, s.disk_misses, s.disk_admitted_bytes), (1, 1, 300 * KIB));
        assert_eq!(c.disk_bytes().unwrap(), STATE_BYTES + entry_bytes(&k));
    }
    let c = DiskCache::open(&dir, 16 << 20).unwrap(); // a restart
    assert_eq!(c.get(&k).as_deref(), Some(&block(&k)[..]));
    assert_eq!(c.stats().disk_leftovers_removed, 0);
    // A second put of a cached block writes nothing.
    c.put(&k, &block(&k));
    assert_eq!(c.stats().disk_admitted_bytes, 0);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_or_foreign_entry_is_a_miss_and_is_removed() {
    let dir = scratch("damaged");
    let c = DiskCache::open(&dir, 16 << 20).unwrap();
    let k = key("s3://b/x.trd", "etag:\"1\"", 0, 64 * KIB);
    type Damage = fn(&BlockKey, &Path, &[u8]) -> Vec<u8>;
    let cases: [(&str, Damage); 7] = [
        ("payload byte flipped", |_, _, e| {
            let mut e = e.to_vec();
            let n = e.len();
            e[n - 100] ^= 1;
            e
        }),
        ("header byte flipped", |_, _, e| {
            let mut e = e.to_vec();
            e[33] ^= 0x80;
            e
        }),
        ("truncated", |_, _, e| e[..e.len() - 1].to_vec()),
        ("a byte appended", |_, _, e| [e, &[0]].concat()),
        ("huge name lengths", |_, _, e| {
            let mut e = e.to_vec();
            e[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
            e
        }),
        ("not an entry", |_, _, e| vec![0x5a; e.len()]),
        ("shorter than a header", |_, _, _| b"TRDBLK1\0".to_vec()),
    ];
    for (what, damage) in cases {
        c.put(&k, &block(&k));
        let path = entry_path(&c, &k);
        let good = fs::read(&path).unwrap();
        fs::write(&path, damage(&k, &path, &good)).unwrap();
        let before = c.stats().disk_corrupt_removed;
        assert_eq!(c.get(&k), None, "{what}");
        assert_eq!(c.stats().disk_corrupt_removed, before + 1, "{what}");
        assert!(!path.exists(), "{what}: the damaged entry is removed");
    }
    // Foreign entries: a whole, valid entry of another block, version or length placed under this key's name.
    let others = [
        key("s3://b/x.trd", "etag:\"1\"", 65536, 64 * KIB), // another offset
        key("s3://b/x.trd", "etag:\"2\"", 0, 64 * KIB),     // another version
        key("s3://b/x.trd", "etag:\"1\"", 0, 64 * KIB - 1), // another length
        key("s3://b/y.trd", "etag:\"1\"", 0, 64 * KIB),     // another object
    ];
    for other in others {
        c.put(&other, &block(&other));
        fs::copy(entry_path(&c, &other), entry_path(&c, &k)).unwrap_or_else(|_| {
            fs::create_dir_all(entry_path(&c, &k).parent().unwrap()).unwrap();
            fs::copy(entry_path(&c, &other), entry_path(&c, &k)).unwrap()
        });
        assert_eq!(c.get(&other).as_deref(), Some(&block(&other)[..]));
        let before = c.stats().disk_corrupt_removed;
        assert_eq!(c.get(&k), None, "{other:?} served for {k:?}");
        assert_eq!(c.stats().disk_corrupt_removed, before + 1);
        assert!(!entry_path(&c, &k).exists());
    }
    // The accounting followed the removals: a fresh recount agrees with it.
    let counted = c.disk_bytes().unwrap();
    drop(c);
    let c = DiskCache::open(&dir, 16 << 20).unwrap();
    assert_eq!(c.disk_bytes().unwrap(), counted);
    assert_eq!(c.lock().unwrap().usage, counted);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_limit_is_honoured_and_a_cyclic_scan_keeps_what_it_admitted() {
    let dir = scratch("limit");
    let limit = 1 << 20;
    let c = DiskCache::open(&dir, limit as i128).unwrap();
    let blocks: Vec<_> = (0..10).map(|b| key("s3://b/x.trd", "etag:\"1\"", b * 250 * KIB, 250 * KIB)).collect();
    let mut hits_per_epoch = Vec::new();
    for _epoch in 0..4 {
        let before = c.stats().disk_hits;
        for k in blocks.iter().rev().chain(blocks.iter()) {
            if c.get(k).is_none() {
                c.put(k, &block(k));
            }
            assert!(c.disk_bytes().unwrap() <= limit);
        }
        hits_per_epoch.push(c.stats().disk_hits - before);
    }
    // 4 blocks of 250 KiB (+ headers) fit in 1 MiB; after the first pass they hit every time, the others never
    // push them out (LRU would hit nothing on this scan).
    assert_eq!(hits_per_epoch, [4, 8, 8, 8]);
    assert!(c.stats().disk_rejected > 0);
    // A block larger than the whole cache is rejected at once.
    let huge = key("s3://b/x.trd", "etag:\"1\"", 1 << 30, 2 << 20);
    let before = c.stats().disk_rejected;
    c.put(&huge, &block(&huge));
    assert_eq!(c.stats().disk_rejected, before + 1);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stale_versions_go_first_then_unused_objects_and_never_a_version_in_use() {
    let dir = scratch("evict");
    let limit = 1 << 20;
    let ks = |object: &str, version: &str, n: u64| -> Vec<BlockKey> {
        (0..n).map(|b| key(object, version, b * 250 * KIB, 250 * KIB)).collect()
    };
    let (y, x1, x2, z) = (
        ks("s3://b/y", "etag:\"1\"", 2),
        ks("s3://b/x", "etag:\"1\"", 2),
        ks("s3://b/x", "etag:\"2\"", 3),
        ks("s3://b/z", "", 1),
    );
    {
        let old = DiskCache::open(&dir, limit).unwrap();
        for k in y.iter().chain(&x1) {
            old.put(k, &block(k));
        }
        assert_eq!(old.stats().disk_admitted_bytes, 4 * 250 * KIB);
        // While `old` lives, its versions are in use: another process cannot evict them.
        let other = DiskCache::open(&dir, limit).unwrap();
        other.put(&z[0], &block(&z[0]));
        assert_eq!(other.stats().disk_rejected, 1);
    } // both exit: nothing in use now
    let c = DiskCache::open(&dir, limit).unwrap();
    // x changed (a new ETag): its old version goes, whole, before y's blocks, older as they are.
    c.put(&x2[0], &block(&x2[0]));
    assert!(x1.iter().all(|k| !entry_path(&c, k).exists()), "the stale version is gone");
    assert!(y.iter().all(|k| entry_path(&c, k).exists()), "the other object stays while there is room");
    // The room x1 left takes one more block; the third comes from y, one entry (not the whole object).
    c.put(&x2[1], &block(&x2[1]));
    c.put(&x2[2], &block(&x2[2]));
    assert_eq!(y.iter().filter(|k| entry_path(&c, k).exists()).count(), 1);
    for k in &x2 {
        assert_eq!(c.get(k).as_deref(), Some(&block(k)[..]));
    }
    assert_eq!(c.get(&y[0]).or_else(|| c.get(&y[1])).map(|b| b.len() as u64), Some(250 * KIB));
    assert!(c.disk_bytes().unwrap() <= limit as u64);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn leftovers_of_dead_processes_are_removed_at_open_and_live_writers_kept() {
    let dir = scratch("leftovers");
    let k = key("s3://b/x.trd", "etag:\"1\"", 0, 100 * KIB);
    {
        let c = DiskCache::open(&dir, 16 << 20).unwrap();
        c.put(&k, &block(&k));
    }
    let root = dir.join(LAYOUT_DIR);
    // A dead writer's temp file (pid 999999999 never exists: above pid_max), half written.
    fs::write(root.join(TMP_DIR).join("999999999-7.tmp"), vec![1u8; 5000]).unwrap();
    // A live writer's temp file: another process holds its lock (an open file description of its own).
    let live_tmp = root.join(TMP_DIR).join(format!("{}-123456789.tmp", std::process::id()));
    let live = OpenOptions::new().create_new(true).write(true).open(&live_tmp).unwrap();
    live.try_lock().unwrap();
    live.set_len(3000).unwrap();
    // A stray file in a version folder and a version folder left empty by a crash.
    let version = root.join(k.version_dir());
    fs::write(version.join("garbage"), b"x").unwrap();
    fs::create_dir_all(root.join(OBJECTS_DIR).join("00000000deadbeef").join("0000000000000001")).unwrap();
    // A torn state file.
    fs::write(root.join(STATE_FILE), b"TRD").unwrap();

    let c = DiskCache::open(&dir, 16 << 20).unwrap();
    assert_eq!(c.stats().disk_leftovers_removed, 3);
    assert!(!root.join(TMP_DIR).join("999999999-7.tmp").exists());
    assert!(live_tmp.exists(), "a live writer's file stays");
    assert!(!version.join("garbage").exists());
    assert!(!root.join(OBJECTS_DIR).join("00000000deadbeef").exists());
    assert_eq!(c.get(&k).as_deref(), Some(&block(&k)[..]));
    // Usage = state + entry + the live reservation, and equals what is on disk.
    let usage = c.lock().unwrap().usage;
    assert_eq!(usage, STATE_BYTES + entry_bytes(&k) + 3000);
    assert_eq!(c.disk_bytes().unwrap(), usage);
    drop(live); // the writer dies: its file is a leftover for the next open
    drop(c);
    let c = DiskCache::open(&dir, 16 << 20).unwrap();
    assert_eq!(c.stats().disk_leftovers_removed, 1);
    assert_eq!(c.disk_bytes().unwrap(), STATE_BYTES + entry_bytes(&k));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_write_is_counted_and_ignored() {
    let dir = scratch("failed-write");
    let c = DiskCache::open(&dir, 16 << 20).unwrap();
    let k = key("s3://b/x.trd", "etag:\"1\"", 0, 64 * KIB);
    // tmp/ replaced by a file: creating a temp file fails (ENOTDIR), as a full or read-only disk would (root
    // ignores permission bits, so a chmod would not fail here).
    let tmp = c.root().join(TMP_DIR);
    fs::remove_dir_all(&tmp).unwrap();
    fs::write(&tmp, b"").unwrap();
    c.put(&k, &block(&k));
    assert_eq!(c.stats().disk_errors, 1);
    assert_eq!(c.get(&k), None);
    assert_eq!(c.lock().unwrap().usage, STATE_BYTES, "no reservation is left behind");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_folders_and_limits_are_config_errors() {
    let param = |r: Result<Option<DiskCache>>| match r {
        Err(TrdataError::Config { parameter, message }) => (parameter, message),
        other => panic!("expected a ConfigError, got {other:?}"),
    };
    let dir = scratch("config");
    assert!(DiskCache::from_params(None, None, true).unwrap().is_none());
    assert_eq!(param(DiskCache::from_params(None, Some(1 << 30), true)).0, "cache_disk_bytes");
    assert_eq!(param(DiskCache::from_params(Some(&dir), None, true)).0, "cache_disk_bytes");
    for bad in [-1, 0, 1000, 1 << 61] {
        assert_eq!(param(DiskCache::from_params(Some(&dir), Some(bad), true)).0, "cache_disk_bytes", "{bad}");
    }
    let (p, m) = param(DiskCache::from_params(Some(&dir), Some(1 << 30), false));
    assert_eq!(p, "cache_dir");
    assert!(m.contains("mode='partial'"), "{m}");
    assert!(!dir.exists(), "a refused cache creates nothing");
    fs::write(&dir, b"a file").unwrap();
    let (p, m) = param(DiskCache::from_params(Some(&dir), Some(1 << 30), true));
    assert_eq!(p, "cache_dir");
    assert!(m.contains("not a folder"), "{m}");
    assert_eq!(param(DiskCache::from_params(Some(&dir.join("below")), Some(1 << 30), true)).0, "cache_dir");
    assert_eq!(param(DiskCache::from_params(Some(Path::new("")), Some(1 << 30), true)).0, "cache_dir");
    fs::remove_file(&dir).unwrap();
    // The user's own files in cache_dir are never touched.
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("notes.txt"), b"mine").unwrap();
    drop(DiskCache::open(&dir, 1 << 30).unwrap());
    assert_eq!(fs::read(dir.join("notes.txt")).unwrap(), b"mine");
    fs::remove_dir_all(&dir).unwrap();
}

/// Many threads over three caches of one folder (three "processes"), putting and getting the same and
/// different blocks of two objects, while short-lived caches of a third object come and go (so room is made
/// concurrently): every block served has exactly its bytes, and the folder never holds more than the limit.
#[test]
fn many_threads_and_caches_share_a_folder_within_the_limit() {
    let dir = scratch("stress");
    let limit: u64 = 2 << 20;
    let caches: Vec<_> = (0..3).map(|_| Arc::new(DiskCache::open(&dir, limit as i128).unwrap())).collect();
    let threads = 8;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let caches = caches.clone();
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut served = 0;
                for step in 0..150u64 {
                    let c = &caches[(t + step as usize) % 3];
                    // Blocks of two objects, 24 in all (more than fit), sizes from 30 to 200 KiB.
                    let object = if (step + t as u64).is_multiple_of(2) { "s3://b/x" } else { "s3://b/y" };
                    let b = (step * 7 + t as u64 * 3) % 12;
                    let k = key(object, "etag:\"1\"", b << 20, 30 * KIB + b * 15 * KIB);
                    match c.get(&k) {
                        Some(bytes) => {
                            assert_eq!(bytes, block(&k), "{k:?}");
                            served += 1;
                        }
                        None => c.put(&k, &block(&k)),
                    }
                    if step % 25 == 0 {
                        // A process of its own that fills what it can and exits.
                        let brief = DiskCache::open(&dir, limit as i128).unwrap();
                        let k = key("s3://b/z", "", (t as u64) << 20, 100 * KIB);
                        brief.put(&k, &block(&k));
                        assert!(brief.get(&k).is_none_or(|got| got == block(&k)));
                    }
                    if step % 10 == 0 {
                        let now = c.disk_bytes().unwrap();
                        assert!(now <= limit, "{now} bytes on disk, limit {limit}");
                    }
                }
                served
            })
        })
        .collect();
    let served: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(served > 0, "some blocks came from disk");
    let stats: Vec<_> = caches.iter().map(|c| c.stats()).collect();
    assert!(stats.iter().all(|s| s.disk_corrupt_removed == 0 && s.disk_errors == 0), "{stats:?}");
    assert!(caches[0].disk_bytes().unwrap() <= limit);
    // The accounting agrees with a recount from the files.
    let usage = caches[0].lock().unwrap().usage;
    assert_eq!(caches[0].disk_bytes().unwrap(), usage);
    drop(caches);
    fs::remove_dir_all(&dir).unwrap();
}

fn arb_header() -> impl Strategy<Value = EntryHeader> {
    (
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::collection::vec(any::<u8>(), 0..100),
        any::<u64>(),
        any::<u64>(),
        0..=MAX_PAYLOAD_BYTES,
        any::<u32>(),
    )
        .prop_map(|(object, version, object_bytes, offset, len, payload_crc)| EntryHeader {
            key: BlockKey { object, version, object_bytes, offset, len },
            payload_crc,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Any bytes: decode never panics, and a `Short` never asks for more than the limit.
    #[test]
    fn header_decode_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 8 {
            bytes[..8].copy_from_slice(&ENTRY_MAGIC); // get past the magic, into the size checks
        }
        match EntryHeader::decode(&bytes) {
            Err(HeaderError::Short { need }) => {
                prop_assert!(need <= FIXED_HEADER_BYTES + MAX_NAME_BYTES && need > bytes.len());
            }
            Err(HeaderError::Damaged(_)) => {}
            Ok(h) => prop_assert!(h.header_bytes() <= bytes.len() && h.key.len <= MAX_PAYLOAD_BYTES),
        }
    }

    /// Encode then decode is the identity, also with bytes after the header; a header cut short says how long it
    /// is; any one byte changed is refused (the CRC, the sizes or the magic), never read as another key.
    #[test]
    fn headers_round_trip_and_a_changed_byte_is_refused(h in arb_header(), at in any::<prop::sample::Index>(), x in 1..=255u8) {
        let enc = h.encode();
        prop_assert_eq!(enc.len(), h.header_bytes());
        prop_assert_eq!(EntryHeader::decode(&enc), Ok(h.clone()));
        prop_assert_eq!(EntryHeader::decode(&[&enc[..], b"payload"].concat()), Ok(h.clone()));
        if enc.len() > FIXED_HEADER_BYTES {
            prop_assert_eq!(EntryHeader::decode(&enc[..enc.len() - 1]), Err(HeaderError::Short { need: enc.len() }));
        }
        let mut bad = enc.clone();
        bad[at.index(enc.len())] ^= x;
        prop_assert!(EntryHeader::decode(&bad).is_err());
    }
}
