use super::*;
use std::io::Write;

fn config_param(r: Result<impl std::fmt::Debug>) -> (String, String) {
    match r {
        Err(TrdataError::Config { parameter, message }) => (parameter, message),
        other => panic!("expected a ConfigError, got {other:?}"),
    }
}

#[test]
fn locations_are_paths_or_checked_urls() {
    let p = |s: &str| Location::parse("path", Path::new(s));
    assert_eq!(p("/data/x.trd").unwrap(), Location::local("/data/x.trd"));
    assert_eq!(p("relative/s3:/x").unwrap(), Location::local("relative/s3:/x"));
    assert_eq!(p("file:///data/x.trd").unwrap(), Location::local("/data/x.trd"));
    let Location::Url { scheme, url } = p("s3://bucket/dir/x.trd").unwrap() else { panic!("url") };
    assert_eq!((scheme, url.host_str()), (Scheme::S3, Some("bucket")));
    for (s, scheme) in [
        ("gs://b/k", Scheme::Gcs),
        ("az://container/k", Scheme::Azure),
        ("abfs://container@account.dfs.core.windows.net/k", Scheme::Azure),
        ("http://127.0.0.1:8000/x.trd", Scheme::Http),
        ("https://example.com/data/x.trd", Scheme::Http),
        ("https://bucket.s3.us-east-1.amazonaws.com/x.trd", Scheme::S3),
    ] {
        assert!(matches!(p(s), Ok(Location::Url { scheme: got, .. }) if got == scheme), "{s}");
    }
    for (s, why) in [
        ("ftp://host/x", "unsupported scheme"),
        ("s3://bucket", "must name an object"),
        ("s3://bucket/dir/", "must name an object"),
        ("https://user:secret@example.com/x", "must not carry credentials"),
        ("https://example.com/x?sig=1", "query"),
        ("http://[::1/x", "not a valid URL"),
        ("file://host/x", "without a host"),
    ] {
        let (param, message) = config_param(p(s));
        assert_eq!(param, "path");
        assert!(message.contains(why), "{s}: {message}");
        assert!(!message.contains("secret") || why.contains("credentials") && message.contains(s), "{message}");
    }
    assert_eq!(p("s3://bucket/k").unwrap().name(), PathBuf::from("s3://bucket/k"));
}

#[test]
fn options_are_checked_once_with_the_parameter_named() {
    let o = |pairs: &[(&str, &str)]| StorageOptions::new(pairs.iter().copied());
    assert_eq!(config_param(o(&[("a", "1"), ("A", "2")])).0, STORAGE_OPTIONS);
    let policy =
        RetryPolicy::from_options(&o(&[("max_retries", "3"), ("retry_init_backoff", "5ms")]).unwrap()).unwrap();
    assert_eq!(
        (policy.max_retries, policy.init_backoff, policy.timeout),
        (3, Duration::from_millis(5), DEFAULT_TIMEOUT)
    );
    for k in 0..20 {
        let b = policy.backoff(k);
        let cap = (5e-3 * 2f64.powi(k as i32)).min(DEFAULT_MAX_BACKOFF.as_secs_f64());
        assert!(b.as_secs_f64() >= cap * 0.5 - 1e-9 && b.as_secs_f64() < cap + 1e-9, "{k}: {b:?}");
    }
    let (param, message) = config_param(RetryPolicy::from_options(&o(&[("max_retries", "many")]).unwrap()));
    assert!(param.contains("max_retries") && message.contains("many"), "{param}: {message}");
    assert!(config_param(RetryPolicy::from_options(&o(&[("timeout", "0s")]).unwrap())).0.contains("timeout"));
    // Keys are the store's: an unknown one, or one of another store, is refused when opened, naming it.
    let url = Location::parse("path", Path::new("s3://b/k")).unwrap();
    let (param, message) = config_param(ObjectReader::open(&url, &o(&[("aws_endpoit", "x")]).unwrap()));
    assert_eq!(param, STORAGE_OPTIONS);
    assert!(message.contains("aws_endpoit"), "{message}");
    let (_, message) = config_param(ObjectReader::open(&url, &o(&[("google_service_account", "x")]).unwrap()));
    assert!(message.contains("not an option of S3 URLs"), "{message}");
    // Options for a local path are a mistake worth saying.
    let (param, _) = config_param(ObjectReader::open(&Location::local("/x"), &o(&[("aws_region", "x")]).unwrap()));
    assert_eq!(param, STORAGE_OPTIONS);
}

#[test]
fn local_reads_are_exact_bounded_and_see_truncation() {
    let dir = std::env::temp_dir().join(format!("trdata-storage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("obj.bin");
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    std::fs::File::create(&path).unwrap().write_all(&data).unwrap();
    let r = ObjectReader::open_local(&path).unwrap();
    assert_eq!(r.size(), 10_000);
    let mut buf = Vec::new();
    r.read_range(4096, 100, 100, &mut buf).unwrap();
    assert_eq!(buf, data[4096..4196]);
    assert_eq!(r.read_region(0, 10_000, "all").unwrap(), data);
    r.read_range(10_000, 0, 100, &mut buf).unwrap(); // empty, at the end: no read
    assert!(buf.is_empty());
    assert_eq!(r.read_range(9_990, 20, 100, &mut buf).unwrap_err().kind, ImageErrorKind::Corrupt);
    assert_eq!(r.read_range(0, 200, 100, &mut buf).unwrap_err().kind, ImageErrorKind::TooLarge);
    assert!(r.read_region(9_000, 2_000, "x").is_err());
    let s = r.stats();
    assert_eq!((s.requests, s.bytes, s.failures), (2, 10_100, 2));
    std::fs::File::create(&path).unwrap().write_all(&data[..5_000]).unwrap(); // truncated in place
    let e = r.read_range(6_000, 100, 100, &mut buf).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::Corrupt);
    assert!(e.message.contains("bytes 6000..6100"), "{}", e.message);
    // Not a regular file, or missing: a SourceError naming it.
    assert!(matches!(ObjectReader::open_local(&dir), Err(TrdataError::Source { .. })));
    assert!(
        matches!(ObjectReader::open_local(&dir.join("none")), Err(TrdataError::Source { path, .. }) if path.ends_with("none"))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unreachable_server_is_retried_then_a_source_error_naming_the_url() {
    // A port nobody listens on (bound, then closed): connections are refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let text = format!("http://127.0.0.1:{port}/x.trd");
    let url = Location::parse("path", Path::new(&text)).unwrap();
    let opts = StorageOptions::new([("max_retries", "2"), ("retry_init_backoff", "1ms")]).unwrap();
    match ObjectReader::open(&url, &opts) {
        Err(TrdataError::Source { path, message }) => {
            assert_eq!(path, PathBuf::from(&text));
            assert!(message.contains("failed 3 times"), "{message}");
        }
        other => panic!("expected a SourceError, got {other:?}"),
    }
}

#[test]
fn prefixes_are_checked_like_objects_and_http_has_no_listing() {
    let p = |s: &str| Location::parse_prefix("root", Path::new(s));
    for ok in ["s3://bucket/train/", "s3://bucket/train", "s3://bucket", "s3://bucket/", "gs://b/x/"] {
        assert!(matches!(p(ok), Ok(Location::Url { .. })), "{ok}");
    }
    assert_eq!(p("/data/train").unwrap(), Location::local("/data/train"));
    for (bad, why) in [
        ("http://127.0.0.1:1/train/", "cannot be listed"),
        ("s3://user:secret@bucket/train/", "credentials"),
        ("s3://bucket/train/?x=1", "query"),
        ("ftp://h/x/", "unsupported scheme"),
    ] {
        let (param, message) = config_param(p(bad));
        assert_eq!(param, "root");
        assert!(message.contains(why) && !message.contains("/x\""), "{bad}: {message}");
    }
}

#[test]
fn an_unreachable_object_set_is_retried_then_an_io_error_naming_the_range() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let spec =
        |k: &str| objects::ObjectSpec { url: format!("http://127.0.0.1:{port}/{k}"), size: Some(100), e_tag: None };
    let opts = StorageOptions::new([("max_retries", "2"), ("retry_init_backoff", "1ms")]).unwrap();
    let set = Arc::new(objects::ObjectSet::new("paths", vec![spec("a"), spec("b")], &opts).unwrap());
    let mut buf = Vec::new();
    // started together (two tasks in flight), each fails after its retries
    let (a, b) = (set.start(0, Some((10, 20)), 1 << 20), set.start(1, None, 1 << 20));
    for (pending, range) in [(a, "bytes 10..30: "), (b, "")] {
        let e = pending.wait(&mut buf).unwrap_err();
        assert_eq!(e.kind, ImageErrorKind::Io);
        assert!(e.message.starts_with(range) && e.message.contains("failed 3 times"), "{}", e.message);
    }
    // limits and bounds are checked before any request
    let e = set.read(0, Some((90, 20)), 1 << 20, &mut buf).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::Corrupt);
    let e = set.read(0, Some((0, 50)), 10, &mut buf).unwrap_err();
    assert_eq!(e.kind, ImageErrorKind::TooLarge);
    let s = set.stats();
    assert_eq!((s.requests, s.retries, s.failures), (6, 4, 4));
}

#[test]
fn an_answers_etag_must_be_the_one_seen_at_open_when_both_are_known() {
    let check = |expected: Option<&str>, got: Option<&str>| {
        remote::check_e_tag(expected, got, "s3://b/k", "the source was opened").map_err(|f| match f {
            remote::Fault::Permanent(m) => m,
            remote::Fault::Transient(m) => panic!("a changed object is not worth a retry: {m}"),
        })
    };
    assert!(check(Some("\"a\""), Some("\"a\"")).is_ok());
    assert!(check(Some("\"a\""), Some("W/\"a\"")).is_ok(), "a weak marker is no difference");
    assert!(check(None, Some("\"a\"")).is_ok() && check(Some("\"a\""), None).is_ok(), "nothing to compare");
    assert_eq!(
        check(Some("\"a\""), Some("\"b\"")).unwrap_err(),
        "the object s3://b/k changed since the source was opened (ETag \"a\" → \"b\")"
    );
}

#[test]
fn blocking_fetches_run_on_the_process_cpus_not_their_starters_core() {
    let all = crate::topology::current_affinity().expect("affinity");
    if all.len() < 2 {
        return; // one CPU: nothing to tell apart
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        assert!(crate::topology::pin_current_thread(&all[..1]), "pin a worker-like thread");
        // Several at once, so the pool grows threads from this pinned thread.
        for _ in 0..4 {
            let tx = tx.clone();
            spawn_blocking(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                tx.send(crate::topology::current_thread_affinity()).unwrap();
            })
            .unwrap();
        }
    })
    .join()
    .unwrap();
    let all = crate::topology::current_affinity().unwrap();
    for _ in 0..4 {
        assert_eq!(rx.recv().unwrap().as_deref(), Some(&all[..]), "a fetch thread kept its starter's one core");
    }
}
