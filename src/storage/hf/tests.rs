//! hf:// against a loopback Hub: two HTTP/1.1 servers written here, the Hub (revision API, tree API in pages,
//! resolve URLs answering 302) and its file store (ranged GETs of presigned URLs, which must never see the token).

use super::*;
use crate::storage::{Location, ObjectReader};
use proptest::prelude::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_testtoken";

#[derive(Debug, Clone)]
struct Req {
    target: String,
    headers: Vec<(String, String)>,
}

impl Req {
    fn header(&self, k: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
    fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn resp(status: u16, body: impl Into<Vec<u8>>) -> Resp {
    Resp { status, headers: Vec::new(), body: body.into() }
}

impl Resp {
    fn with(mut self, k: &str, v: impl Into<String>) -> Self {
        self.headers.push((k.to_string(), v.into()));
        self
    }
}

type Handler = Arc<dyn Fn(&Req) -> Resp + Send + Sync>;

/// An HTTP/1.1 server on 127.0.0.1 (keep-alive, GETs without bodies) answering with `handler`; its port.
fn serve(handler: Handler) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let h = Arc::clone(&handler);
            std::thread::spawn(move || connection(conn, &*h));
        }
    });
    port
}

fn connection(conn: TcpStream, handler: &(dyn Fn(&Req) -> Resp + Send + Sync)) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut l = String::new();
            if reader.read_line(&mut l).unwrap_or(0) == 0 {
                return;
            }
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let r = handler(&Req { target, headers });
        let mut head = format!("HTTP/1.1 {} X\r\ncontent-length: {}\r\n", r.status, r.body.len());
        for (k, v) in &r.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).and_then(|()| out.write_all(&r.body)).is_err() {
            return;
        }
    }
}

/// What the Hub's tree pages do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Two pages, the second through the first's Link header.
    Normal,
    /// The second page lists `data/../secret`.
    DotDot,
    /// Every page links to another.
    Endless,
    /// The second page is cut inside an entry.
    BadJson,
    /// The first page's next link is on another host.
    ForeignNext,
    /// The file store answers ranges with 200 and the whole file.
    IgnoreRange,
}

struct Hub {
    /// The Hub's port (its Link headers name it).
    port: AtomicU32,
    mode: std::sync::Mutex<Mode>,
    /// 429s the file store answers before serving a range.
    throttle: AtomicU32,
    /// Things the servers saw that must not happen (a token at the file store, a read without Range).
    violations: std::sync::Mutex<Vec<String>>,
    /// Ranged GETs the file store served.
    ranged: AtomicU32,
    /// 429s (with `RateLimit: "api";r=0;t=1`) the Hub's API answers before serving.
    api_throttle: AtomicU32,
}

fn files() -> Vec<(&'static str, Vec<u8>)> {
    let bytes = |n: u32, k: u32| (0..n).map(|i| (i * k % 251) as u8).collect::<Vec<u8>>();
    vec![
        ("README.md", b"# toy".to_vec()),
        ("data/train-00000-of-00002.parquet", bytes(5000, 7)),
        ("data/train-00001-of-00002.parquet", bytes(3000, 11)),
        ("data/test-00000-of-00001.parquet", bytes(700, 13)),
        ("data/extra/notes.txt", bytes(10, 3)),
    ]
}

fn entry_json(path: &str, size: usize, lfs: bool) -> String {
    if lfs {
        format!(
            r#"{{"type":"file","oid":"9f2c","size":{size},"lfs":{{"oid":"ab12","size":{size},"pointerSize":134}},"xetHash":"77","path":"{path}"}}"#
        )
    } else {
        format!(r#"{{"type":"file","oid":"9f2c","size":{size},"path":"{path}"}}"#)
    }
}

impl Hub {
    /// The Hub and its file store; the Hub requires `token` when given.
    fn start(token: Option<&'static str>) -> Arc<Self> {
        let hub = Arc::new(Hub {
            port: AtomicU32::new(0),
            mode: std::sync::Mutex::new(Mode::Normal),
            throttle: AtomicU32::new(0),
            violations: std::sync::Mutex::new(Vec::new()),
            ranged: AtomicU32::new(0),
            api_throttle: AtomicU32::new(0),
        });
        let store_port = {
            let hub = Arc::clone(&hub);
            serve(Arc::new(move |r: &Req| hub.store(r)))
        };
        let port = {
            let hub = Arc::clone(&hub);
            serve(Arc::new(move |r: &Req| hub.api(r, token, store_port)))
        };
        hub.port.store(u32::from(port), Ordering::SeqCst);
        hub
    }

    fn port(&self) -> u16 {
        self.port.load(Ordering::SeqCst) as u16
    }

    fn set_mode(&self, m: Mode) {
        *self.mode.lock().unwrap() = m;
    }

    fn api(&self, r: &Req, token: Option<&str>, store_port: u16) -> Resp {
        let port = self.port();
        if let Some(t) = token
            && r.header("authorization") != Some(&format!("Bearer {t}"))
        {
            return resp(401, r#"{"error":"Invalid credentials"}"#);
        }
        let mode = *self.mode.lock().unwrap();
        let path = r.path();
        if path.starts_with("/api/") && self.api_throttle.load(Ordering::SeqCst) > 0 {
            self.api_throttle.fetch_sub(1, Ordering::SeqCst);
            return resp(429, "rate limited").with("ratelimit", r#""api";r=0;t=1"#).with("retry-after", "30");
        }
        if path == format!("/datasets/org/name/resolve/{SHA}/loop") {
            return resp(302, "").with("location", format!("http://127.0.0.1:{port}{path}"));
        }
        if let Some(rev) = path.strip_prefix("/api/datasets/org/name/revision/") {
            if !matches!(rev, "main" | "refs%2Fconvert%2Fparquet" | SHA) || r.query() != "expand=sha" {
                return resp(404, r#"{"error":"Revision not found"}"#);
            }
            return resp(200, format!(r#"{{"_id":"x","id":"org/name","sha":"{SHA}","siblings":[]}}"#))
                .with("x-repo-commit", SHA);
        }
        if let Some(rest) = path.strip_prefix(&format!("/api/datasets/org/name/tree/{SHA}")) {
            let folder = rest.strip_prefix('/').unwrap_or(rest).replace("%2F", "/");
            if r.query().split('&').take(2).collect::<Vec<_>>() != ["recursive=true", "expand=false"] {
                return resp(400, "bad query");
            }
            let all = files();
            let under: Vec<&(&str, Vec<u8>)> =
                all.iter().filter(|(p, _)| folder.is_empty() || p.starts_with(&format!("{folder}/"))).collect();
            if under.is_empty() {
                return resp(404, r#"{"error":"not found"}"#);
            }
            let cursor = r.query().split('&').find_map(|kv| kv.strip_prefix("cursor=")).unwrap_or("");
            let next = |c: &str| {
                format!(
                    "<http://127.0.0.1:{port}/api/datasets/org/name/tree/{SHA}{rest}?recursive=true&expand=false&cursor={c}>; rel=\"next\""
                )
            };
            if mode == Mode::Endless {
                let k: u32 = cursor.parse().unwrap_or(0);
                return resp(200, "[]").with("link", next(&(k + 1).to_string()));
            }
            let half = under.len() / 2;
            let entries = |part: &[&(&str, Vec<u8>)]| {
                part.iter().enumerate().map(|(i, (p, b))| entry_json(p, b.len(), i % 2 == 0)).collect::<Vec<_>>()
            };
            if cursor.is_empty() {
                let mut page = entries(&under[..half]);
                if folder == "data" {
                    page.insert(0, r#"{"type":"directory","oid":"1","path":"data/extra"}"#.to_string());
                }
                let link = if mode == Mode::ForeignNext {
                    format!("<http://localhost:{store_port}/api/x?cursor=p2>; rel=\"next\"")
                } else {
                    format!("{}, <http://127.0.0.1:{port}/x>; rel=\"prev\"", next("p2"))
                };
                return resp(200, format!("[{}]", page.join(","))).with("link", link);
            }
            let mut page = entries(&under[half..]);
            match mode {
                Mode::DotDot => page.push(entry_json("data/../secret", 1, false)),
                Mode::BadJson => return resp(200, r#"[{"type":"file","path":"data/x","#),
                _ => {}
            }
            return resp(200, format!("[{}]", page.join(",")));
        }
        if let Some(file) = path.strip_prefix(&format!("/datasets/org/name/resolve/{SHA}/")) {
            return resp(302, "")
                .with(
                    "location",
                    format!("http://127.0.0.1:{store_port}/blobs/{file}?X-Amz-Expires=3600&X-Amz-Signature=s"),
                )
                .with("x-linked-size", "0")
                .with("x-repo-commit", SHA);
        }
        resp(404, "no route")
    }

    fn store(&self, r: &Req) -> Resp {
        if r.header("authorization").is_some() {
            self.violations.lock().unwrap().push(format!("the file store got a token: {}", r.target));
        }
        if !r.query().contains("X-Amz-Signature=s") {
            return resp(403, "not signed");
        }
        let Some(name) = r.path().strip_prefix("/blobs/") else { return resp(404, "") };
        let all = files();
        let Some((_, data)) = all.iter().find(|(p, _)| *p == name) else { return resp(404, "") };
        let Some(range) = r.header("range") else {
            self.violations.lock().unwrap().push(format!("a read without Range: {}", r.target));
            return resp(200, data.clone());
        };
        if self.throttle.load(Ordering::SeqCst) > 0 {
            self.throttle.fetch_sub(1, Ordering::SeqCst);
            return resp(429, "slow down").with("retry-after", "1");
        }
        if *self.mode.lock().unwrap() == Mode::IgnoreRange {
            return resp(200, data.clone());
        }
        let (a, b) = range.strip_prefix("bytes=").and_then(|s| s.split_once('-')).unwrap();
        let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
        self.ranged.fetch_add(1, Ordering::SeqCst);
        resp(206, data[a..=b].to_vec()).with("content-range", format!("bytes {a}-{b}/{}", data.len()))
    }
}

fn options(hub: &Arc<Hub>, token: &str) -> StorageOptions {
    StorageOptions::new([
        ("hf_endpoint", format!("http://127.0.0.1:{}/", hub.port())),
        ("hf_token", token.to_string()),
        ("retry_init_backoff", "1ms".to_string()),
        ("max_retries", "3".to_string()),
    ])
    .unwrap()
}

fn source_message<T: std::fmt::Debug>(r: Result<T>) -> (std::path::PathBuf, String) {
    match r {
        Err(TrdataError::Source { path, message }) => (path, message),
        other => panic!("expected a SourceError, got {other:?}"),
    }
}

fn config_message<T: std::fmt::Debug>(r: Result<T>) -> (String, String) {
    match r {
        Err(TrdataError::Config { parameter, message }) => (parameter, message),
        other => panic!("expected a ConfigError, got {other:?}"),
    }
}

#[test]
fn the_grammar_is_the_hubs() {
    let p = |s: &str| HfPattern::parse("files", s);
    let ok = p("hf://datasets/org/name@main/data/train-*.parquet").unwrap();
    assert_eq!(
        (ok.repo.as_str(), ok.revision.as_str(), ok.path.as_str()),
        ("org/name", "main", "data/train-*.parquet")
    );
    assert_eq!(ok.folder(), "data");
    assert!(ok.is_glob());
    let d = p("hf://datasets/org/name/data/x.parquet").unwrap();
    assert_eq!((d.revision.as_str(), d.folder(), d.is_glob()), ("main", "data", false));
    assert_eq!(p("hf://datasets/org/name/x.parquet").unwrap().folder(), "");
    assert_eq!(p("hf://datasets/org/name/**/*.parquet").unwrap().folder(), "");
    assert_eq!(p("hf://datasets/org/name/a/b/*/c.parquet").unwrap().folder(), "a/b");
    // refs/convert/… and refs/pr/… are taken whole, slashes included; others end at the next '/'.
    let c = p("hf://datasets/org/name@refs/convert/parquet/default/train/*.parquet").unwrap();
    assert_eq!((c.revision.as_str(), c.path.as_str()), ("refs/convert/parquet", "default/train/*.parquet"));
    let pr = p("hf://datasets/org/name@refs/pr/12/data/x.parquet").unwrap();
    assert_eq!((pr.revision.as_str(), pr.path.as_str()), ("refs/pr/12", "data/x.parquet"));
    let q = p("hf://datasets/org/name@refs%2Fconvert%2Fparquet/default/x.parquet").unwrap();
    assert_eq!((q.revision.as_str(), q.path.as_str()), ("refs/convert/parquet", "default/x.parquet"));
    let v = p("hf://datasets/org/name@v1.0/x.parquet").unwrap();
    assert_eq!(v.revision, "v1.0");
    // An '@' deeper than the name is part of the path.
    let at = p("hf://datasets/org/name/data/a@b.parquet").unwrap();
    assert_eq!((at.revision.as_str(), at.path.as_str()), ("main", "data/a@b.parquet"));
    for (bad, why) in [
        ("hf://datasets/squad", "one segment"),
        ("hf://datasets/squad@main/x.parquet", "one segment"),
        ("hf://datasets/org/name", "must name files"),
        ("hf://datasets/org/name@main", "must name files"),
        ("hf://datasets/org/name@/x", "empty or overlong revision"),
        ("hf://org/name/x.parquet", "must name a dataset"),
        ("hf://models/org/name/x.bin", "only datasets"),
        ("hf://datasets/o--rg/name/x", "'--'"),
        ("hf://datasets/org/-name/x", "start or end"),
        ("hf://datasets/org/na me/x", "only letters"),
        ("hf://datasets/org/name/data/../x", "'..'"),
        ("hf://datasets/org/name/data//x", "empty"),
        ("hf://datasets/org/name/data/", "empty"),
        ("hf://datasets/org/name@%ff/x", "not UTF-8"),
        ("hf://datasets/org/name/a\nb", "control"),
    ] {
        let (param, message) = config_message(p(bad));
        assert_eq!(param, "files");
        assert!(message.contains(why), "{bad}: {message}");
    }
    // Location::parse is the one home of URL parsing: hf:// is a checked pattern, remote, named as written.
    let loc = Location::parse("path", Path::new("hf://datasets/org/name/x.parquet")).unwrap();
    assert!(matches!(&loc, Location::HfPattern(p) if p.repo == "org/name") && loc.is_remote());
    assert_eq!(loc.name(), std::path::PathBuf::from("hf://datasets/org/name/x.parquet"));
    assert!(config_message(Location::parse("path", Path::new("hf://datasets/x"))).1.contains("one segment"));
    assert!(config_message(Location::parse_prefix("root", Path::new("hf://datasets/o/n/d"))).1.contains("glob"));
}

#[test]
fn globs_match_segments_and_double_stars_cross_them() {
    for (pattern, path, want) in [
        ("data/train-*.parquet", "data/train-00000-of-00002.parquet", true),
        ("data/train-*.parquet", "data/test-00000.parquet", false),
        ("data/*.parquet", "data/sub/x.parquet", false),
        ("data/**", "data/sub/x.parquet", true),
        ("data/**", "data/x", true),
        ("**/*.parquet", "x.parquet", true),
        ("**/*.parquet", "a/b/c/x.parquet", true),
        ("**/*.parquet", "a/b/c/x.json", false),
        ("a/**/b/*.p", "a/b/x.p", true),
        ("a/**/b/*.p", "a/1/2/b/x.p", true),
        ("a/**/b/*.p", "a/1/2/c/x.p", false),
        ("x-?.p", "x-1.p", true),
        ("x-?.p", "x-12.p", false),
        ("x-[0-4].p", "x-3.p", true),
        ("x-[0-4].p", "x-7.p", false),
        ("x-[!0-4].p", "x-7.p", true),
        ("x-[^ab].p", "x-a.p", false),
        ("x-[]].p", "x-].p", true),
        ("x-[.p", "x-[.p", true),
        ("*", "a/b", false),
        ("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
        ("dé*", "dé-ü.p", true),
        ("data/x.parquet", "data/x.parquet", true),
    ] {
        assert_eq!(glob_match(pattern, path), want, "{pattern} ~ {path}");
    }
}

#[test]
fn the_token_comes_from_the_environment_in_the_hubs_order() {
    let dir = std::env::temp_dir().join(format!("trdata-hf-token-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("hfhome")).unwrap();
    std::fs::write(dir.join("hfhome/token"), "  hf_from_home_file\n").unwrap();
    std::fs::write(dir.join("explicit"), "hf_from_token_path\n").unwrap();
    std::fs::create_dir_all(dir.join("xdg/huggingface")).unwrap();
    std::fs::write(dir.join("xdg/huggingface/token"), "hf_xdg").unwrap();
    std::fs::create_dir_all(dir.join("home/.cache/huggingface")).unwrap();
    std::fs::write(dir.join("home/.cache/huggingface/token"), "hf_home_cache").unwrap();
    let d = dir.to_str().unwrap().to_string();
    let env = |pairs: &[(&str, String)]| {
        let map: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        token_from_env(&move |k: &str| map.get(k).cloned())
    };
    let home = ("HOME", format!("{d}/home"));
    assert_eq!(
        env(&[("HF_TOKEN", " hf_a \n".into()), ("HUGGING_FACE_HUB_TOKEN", "hf_b".into())]).as_deref(),
        Some("hf_a")
    );
    assert_eq!(env(&[("HF_TOKEN", String::new()), ("HUGGING_FACE_HUB_TOKEN", "hf_b".into())]).as_deref(), Some("hf_b"));
    assert_eq!(env(&[("HF_TOKEN", "   ".into()), home.clone()]), None, "set but blank: none (as the Hub's library)");
    assert_eq!(
        env(&[("HF_TOKEN_PATH", format!("{d}/explicit")), ("HF_HOME", format!("{d}/hfhome")), home.clone()]).as_deref(),
        Some("hf_from_token_path")
    );
    assert_eq!(env(&[("HF_HOME", format!("{d}/hfhome")), home.clone()]).as_deref(), Some("hf_from_home_file"));
    assert_eq!(env(&[("XDG_CACHE_HOME", format!("{d}/xdg")), home.clone()]).as_deref(), Some("hf_xdg"));
    assert_eq!(env(std::slice::from_ref(&home)).as_deref(), Some("hf_home_cache"));
    assert_eq!(env(&[("HF_HOME", "~/nowhere".into()), home.clone()]), None);
    std::fs::write(dir.join("explicit"), "\n \n").unwrap();
    assert_eq!(env(&[("HF_TOKEN_PATH", format!("{d}/explicit")), home]), None, "an empty file is no token");
    std::fs::remove_dir_all(&dir).unwrap();

    // storage_options win over the environment; keys and the endpoint are checked.
    let opts = |pairs: &[(&str, &str)]| StorageOptions::new(pairs.iter().copied()).unwrap();
    let env_token = |k: &str| (k == "HF_TOKEN").then(|| "hf_env".to_string());
    let c = HfConfig::new(&opts(&[("hf_token", "hf_opt")]), &env_token).unwrap();
    assert_eq!((c.token.as_deref(), c.base().as_str()), (Some("hf_opt"), DEFAULT_ENDPOINT));
    assert_eq!(HfConfig::new(&opts(&[]), &env_token).unwrap().token.as_deref(), Some("hf_env"));
    assert_eq!(HfConfig::new(&opts(&[("hf_token", " ")]), &env_token).unwrap().token, None);
    let env_endpoint = |k: &str| (k == "HF_ENDPOINT").then(|| "https://hub.example.org/".to_string());
    assert_eq!(HfConfig::new(&opts(&[]), &env_endpoint).unwrap().base(), "https://hub.example.org");
    let (p, m) = config_message(HfConfig::new(&opts(&[("aws_region", "x")]), &env_token));
    assert!(p == STORAGE_OPTIONS && m.contains("aws_region") && m.contains("hf_endpoint"), "{m}");
    let (p, m) = config_message(HfConfig::new(&opts(&[("hf_endpoint", "ftp://x")]), &env_token));
    assert!(p.contains("hf_endpoint") && m.contains("http(s)"), "{p}: {m}");
    let (p, _) = config_message(HfConfig::new(&opts(&[]), &|k: &str| (k == "HF_ENDPOINT").then(|| "nonsense".into())));
    assert_eq!(p, "HF_ENDPOINT");
}

#[test]
fn a_pattern_expands_to_one_commits_files_read_through_the_redirect() {
    let hub = Hub::start(Some(TOKEN));
    let opts = options(&hub, TOKEN);
    let port = hub.port();
    let found = expand("files", "hf://datasets/org/name@main/data/train-*.parquet", &opts).unwrap();
    let names: Vec<(&str, u64)> = found.iter().map(|f| (f.path.as_str(), f.size)).collect();
    assert_eq!(names, [("data/train-00000-of-00002.parquet", 5000), ("data/train-00001-of-00002.parquet", 3000)]);
    assert_eq!(
        found[0].url,
        format!("http://127.0.0.1:{port}/datasets/org/name/resolve/{SHA}/data/train-00000-of-00002.parquet")
    );
    assert_eq!(found[0].name(), format!("hf://datasets/org/name@{SHA}/data/train-00000-of-00002.parquet"));
    // ** crosses folders, from the root; refs/convert/parquet resolves too.
    let all = expand("files", "hf://datasets/org/name@refs/convert/parquet/**", &opts).unwrap();
    assert_eq!(all.len(), files().len());
    assert!(all.windows(2).all(|w| w[0].path < w[1].path), "sorted");
    let nested = expand("files", "hf://datasets/org/name/data/**/*.txt", &opts).unwrap();
    assert_eq!(nested.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["data/extra/notes.txt"]);

    // A read: 429 with Retry-After: 1 first, then the range through the 302, without the token at the store.
    let reader = ObjectReader::open(&Location::Hf(found[0].clone()), &opts).unwrap();
    assert_eq!((reader.size(), reader.version()), (5000, format!("commit:{SHA}")));
    hub.throttle.store(1, Ordering::SeqCst);
    let data = &files()[1].1;
    let mut buf = Vec::new();
    let t = Instant::now();
    reader.read_range(1000, 2000, 1 << 20, &mut buf).unwrap();
    let waited = t.elapsed();
    assert_eq!(buf, data[1000..3000]);
    assert!(waited >= Duration::from_secs(1), "Retry-After: 1 was honoured ({waited:?})");
    let s = reader.stats();
    assert_eq!((s.requests, s.retries, s.failures, s.bytes), (2, 1, 0, 2000));
    reader.read_range(4990, 10, 10, &mut buf).unwrap();
    assert_eq!(buf, data[4990..]);
    assert_eq!(reader.read_region(0, 5000, "all").unwrap(), *data);
    assert_eq!(hub.ranged.load(Ordering::SeqCst), 3);
    assert_eq!(*hub.violations.lock().unwrap(), Vec::<String>::new());

    // A plain path through Location::parse opens as one file; a glob of two is refused there.
    let one = Location::parse("path", Path::new("hf://datasets/org/name/data/test-00000-of-00001.parquet")).unwrap();
    let r = ObjectReader::open(&one, &opts).unwrap();
    assert_eq!(r.size(), 700);
    r.read_range(0, 700, 700, &mut buf).unwrap();
    assert_eq!(buf, files()[3].1);
    let two = Location::parse("path", Path::new("hf://datasets/org/name/data/train-*")).unwrap();
    let (path, message) = source_message(ObjectReader::open(&two, &opts));
    assert_eq!(path, std::path::PathBuf::from("hf://datasets/org/name/data/train-*"));
    assert!(message.contains("names 2 files"), "{message}");

    // A source's locations: patterns expanded in place, in order, other locations kept.
    let mixed = [
        Location::parse("files", Path::new("hf://datasets/org/name/data/test-*")).unwrap(),
        Location::Hf(found[1].clone()),
        Location::parse("files", Path::new("hf://datasets/org/name/data/train-*")).unwrap(),
    ];
    let expanded = expand_locations("files", &mixed, &opts).unwrap();
    let paths: Vec<&str> = expanded
        .iter()
        .map(|l| match l {
            Location::Hf(f) => f.path.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        paths,
        [
            "data/test-00000-of-00001.parquet",
            "data/train-00001-of-00002.parquet",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet"
        ]
    );

    // No match, an unknown revision, a missing folder: SourceErrors naming the pattern.
    let (path, message) = source_message(expand("files", "hf://datasets/org/name/data/*.csv", &opts));
    assert!(path.ends_with("*.csv") && message.contains("no file") && message.contains(SHA), "{message}");
    let (_, message) = source_message(expand("files", "hf://datasets/org/name/nothing/*.csv", &opts));
    assert!(message.contains("no file"), "{message}");
    let (_, message) = source_message(expand("files", "hf://datasets/org/name@v9/x", &opts));
    assert!(message.contains("revision \"v9\"") && message.contains("404"), "{message}");

    // Without the token the Hub refuses at once (401 is not retried).
    let (_, message) = source_message(expand("files", "hf://datasets/org/name/data/*", &options(&hub, "")));
    assert!(message.contains("access denied") && message.contains("401"), "{message}");
    assert!(!message.contains(TOKEN));
    let stranger = ObjectReader::open(&Location::Hf(found[1].clone()), &options(&hub, "")).unwrap();
    let e = stranger.read_range(0, 10, 10, &mut buf).unwrap_err();
    assert!(e.kind == ImageErrorKind::Io && e.message.contains("401"), "{}", e.message);
    assert_eq!(stranger.stats().retries, 0);
}

#[test]
fn hostile_listings_and_answers_are_typed_errors() {
    let hub = Hub::start(None);
    let opts = options(&hub, "");
    let config = HfConfig::new(&opts, &|_| None).unwrap();
    let pattern = HfPattern::parse("files", "hf://datasets/org/name/data/*.parquet").unwrap();
    let cases = [
        (Mode::DotDot, Limits::default(), "'..'"),
        (Mode::BadJson, Limits::default(), "page 1"),
        (Mode::Endless, Limits { pages: 5, ..Limits::default() }, "more than 5 pages"),
        (Mode::Normal, Limits { entries: 3, ..Limits::default() }, "more than"),
        (Mode::Normal, Limits { page_bytes: 100, ..Limits::default() }, "larger than 100 bytes"),
        (Mode::ForeignNext, Limits::default(), "leaves the Hub's host"),
    ];
    for (mode, limits, why) in cases {
        hub.set_mode(mode);
        let (path, message) = source_message(expand_with(&pattern, &config, limits));
        assert_eq!(path, std::path::PathBuf::from(&pattern.text));
        assert!(message.contains(why), "{mode:?}: {message}");
    }
    // A whole-file answer to a range request is refused, not retried.
    hub.set_mode(Mode::Normal);
    let found = expand_with(&pattern, &config, Limits::default()).unwrap();
    hub.set_mode(Mode::IgnoreRange);
    let reader = ObjectReader::open(&Location::Hf(found[0].clone()), &opts).unwrap();
    let mut buf = Vec::new();
    let e = reader.read_range(10, 10, 10, &mut buf).unwrap_err();
    assert!(e.kind == ImageErrorKind::Io && e.message.contains("HTTP 200"), "{}", e.message);
    assert_eq!((reader.stats().retries, reader.stats().failures), (0, 1));
    // A file listed at another size than the store's is "changed since", permanent.
    hub.set_mode(Mode::Normal);
    let mut wrong = found[0].clone();
    wrong.size = 6000;
    let reader = ObjectReader::open(&Location::Hf(wrong), &opts).unwrap();
    let e = reader.read_range(0, 10, 10, &mut buf).unwrap_err();
    assert!(e.message.contains("changed since"), "{}", e.message);
    // Reads past the listed size are refused before any request.
    assert_eq!(reader.read_range(5990, 20, 100, &mut buf).unwrap_err().kind, ImageErrorKind::Corrupt);
    // The API's 429 waits RateLimit's t (1 s), not Retry-After's 30 s.
    hub.api_throttle.store(2, Ordering::SeqCst);
    let t = Instant::now();
    assert_eq!(expand_with(&pattern, &config, Limits::default()).unwrap(), found);
    let waited = t.elapsed();
    assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(20), "{waited:?}");
    // A redirect loop ends after a few hops, as a permanent error.
    let mut looping = found[0].clone();
    looping.url = format!("http://127.0.0.1:{}/datasets/org/name/resolve/{SHA}/loop", hub.port());
    let reader = ObjectReader::open(&Location::Hf(looping), &opts).unwrap();
    let e = reader.read_range(0, 10, 10, &mut buf).unwrap_err();
    assert!(e.message.contains("redirect"), "{}", e.message);
    assert_eq!(reader.stats().retries, 0);
    // An unreachable Hub: retried, then a SourceError.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let o = StorageOptions::new([
        ("hf_endpoint", format!("http://127.0.0.1:{gone}")),
        ("max_retries", "2".into()),
        ("retry_init_backoff", "1ms".into()),
    ])
    .unwrap();
    let (_, message) = source_message(expand("files", "hf://datasets/org/name/x", &o));
    assert!(message.contains("failed 3 times"), "{message}");
}

#[test]
fn tree_pages_revisions_links_and_ranges_parse_strictly() {
    let page = br#"[{"type":"directory","oid":"1","path":"data"},
        {"type":"file","oid":"2","size":135,"lfs":{"oid":"x","size":7054249,"pointerSize":135},"path":"data/a.parquet"},
        {"type":"file","oid":"3","size":12,"path":"README.md","unknown":[1,{"deep":null}]}]"#;
    let got = parse_tree_page(page, 10).unwrap();
    assert_eq!(
        got,
        [
            TreeEntry { is_file: false, path: "data".into(), size: None },
            TreeEntry { is_file: true, path: "data/a.parquet".into(), size: Some(7054249) },
            TreeEntry { is_file: true, path: "README.md".into(), size: Some(12) },
        ]
    );
    assert!(parse_tree_page(page, 2).unwrap_err().contains("more than 2 entries"));
    for (bad, why) in [
        (&br#"{"path":"x"}"#[..], "list"),
        (br#"[{"type":"file","path":"x"}]"#, "missing for a file"),
        (br#"[{"type":"file","path":"/etc/passwd","size":1}]"#, "starts with '/'"),
        (br#"[{"type":"file","path":"a/../../b","size":1}]"#, "'..'"),
        (br#"[{"type":"file","path":"a","size":-1}]"#, "non-negative"),
        (br#"[{"type":"file","path":"a","size":1.5}]"#, "non-negative"),
        (br#"[{"type":"file","path":"a","size":99999999999999999999999}]"#, "non-negative"),
        (br#"[{"type":"link","path":"a","size":1}]"#, "neither"),
        (br#"[{"type":"file","path":"a","size":1}] x"#, "trailing"),
        (br#"[{"type":"file","path":"a\ud800","size":1}]"#, "surrogate"),
        (b"[\xff]", "UTF-8"),
        (b"[1]", "expected an object"),
    ] {
        let e = parse_tree_page(bad, 10).unwrap_err();
        assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(bad));
    }
    let long = format!(r#"[{{"type":"file","path":"{}","size":1}}]"#, "a".repeat(MAX_PATH_BYTES + 1));
    assert!(parse_tree_page(long.as_bytes(), 10).unwrap_err().contains("longer than"));

    assert_eq!(parse_revision(br#"{"id":"o/n","sha":"abc","siblings":[{}]}"#).unwrap().as_deref(), Some("abc"));
    assert_eq!(parse_revision(br#"{"id":"o/n"}"#).unwrap(), None);
    assert!(parse_revision(b"[]").is_err() && parse_revision(br#"{"sha":1}"#).is_err());

    assert_eq!(next_link(r#"<https://h/a?cursor=x>; rel="next""#).as_deref(), Some("https://h/a?cursor=x"));
    assert_eq!(next_link(r#"<https://h/p>; rel="prev", <https://h/n>; rel=next"#).as_deref(), Some("https://h/n"));
    assert_eq!(next_link(r#"<https://h/p>; rel="prev""#), None);
    assert_eq!(next_link("garbage <unclosed"), None);

    assert!(check_content_range(Some("bytes 10-19/100"), 10, 10, 100).is_ok());
    assert!(check_content_range(Some("bytes 10-19/*"), 10, 10, 100).is_ok());
    assert!(check_content_range(Some("bytes 0-19/100"), 10, 10, 100).unwrap_err().contains("not the 10-19"));
    assert!(check_content_range(Some("bytes 10-19/101"), 10, 10, 100).unwrap_err().contains("changed since"));
    assert!(check_content_range(Some("items 1-2/3"), 1, 2, 3).unwrap_err().contains("malformed"));
    assert!(check_content_range(None, 1, 2, 3).is_err());

    let mut h = reqwest::header::HeaderMap::new();
    h.insert("retry-after", "7".parse().unwrap());
    assert_eq!(server_wait(&h), Some(Duration::from_secs(7)));
    h.insert("ratelimit", r#""api";r=0;t=55"#.parse().unwrap());
    assert_eq!(server_wait(&h), Some(Duration::from_secs(55)), "RateLimit first when r=0");
    h.insert("ratelimit", r#""api";r=3;t=55"#.parse().unwrap());
    assert_eq!(server_wait(&h), Some(Duration::from_secs(7)));
    h.insert("retry-after", "86400".parse().unwrap());
    assert_eq!(server_wait(&h), Some(MAX_RETRY_AFTER), "capped");
    h.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
    assert_eq!(server_wait(&h), None, "HTTP dates are not read: the backoff applies");
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// A page as the Hub writes it (keys in its order, an LFS file, a folder, a plain file).
const REAL_PAGE: &[u8] = br#"[{"type":"directory","oid":"6a0f0e4b","path":"data"},{"type":"file","oid":"c2b8e3a1","size":7054249,"lfs":{"oid":"3b4c8f0d9e","size":7054249,"pointerSize":134},"xetHash":"a1b2c3","path":"data/train-00000-of-00001.parquet"},{"type":"file","oid":"e69de29b","size":2048,"path":"README.md"}]"#;

#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
    Splice(usize, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        any::<usize>().prop_map(Edit::Cut),
        (
            any::<usize>(),
            prop_oneof![
                Just(b"..".to_vec()),
                Just(b"/".to_vec()),
                Just(b"\\u0000".to_vec()),
                Just(b"-1".to_vec()),
                Just(b"[[[[[[[[".to_vec()),
                Just(b"99999999999999999999".to_vec()),
                Just(b"\"".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..8),
            ]
        )
            .prop_map(|(i, v)| Edit::Insert(i, v)),
        (any::<usize>(), any::<usize>(), any::<usize>()).prop_map(|(a, b, c)| Edit::Splice(a, b, c)),
    ]
}

fn apply(mut data: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = data.len().max(1);
        match e {
            Edit::Flip(i, b) => {
                if !data.is_empty() {
                    data[i % n] ^= b | 1;
                }
            }
            Edit::Cut(i) => data.truncate(i % (n + 1)),
            Edit::Insert(i, v) => {
                let at = i % (data.len() + 1);
                data.splice(at..at, v.iter().copied());
            }
            Edit::Splice(a, b, c) => {
                // copy a slice of the text elsewhere (repeats entries, keys, brackets)
                let (a, b) = ((a % n).min(b % n), (a % n).max(b % n));
                let piece = data.get(a..b).unwrap_or_default().to_vec();
                let at = c % (data.len() + 1);
                data.splice(at..at, piece);
            }
        }
    }
    data
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(4000), ..ProptestConfig::default() })]

    /// A real page mutated: a list of checked entries or an error, never a panic.
    #[test]
    fn mutated_tree_pages_never_panic(edits in proptest::collection::vec(edit(), 1..6)) {
        let data = apply(REAL_PAGE.to_vec(), &edits);
        if let Ok(entries) = parse_tree_page(&data, 100) {
            prop_assert!(entries.len() <= 100);
            for e in entries {
                prop_assert!(check_repo_path(&e.path).is_ok(), "{:?}", e.path);
                prop_assert!(!e.is_file || e.size.is_some());
            }
        }
        let _ = parse_revision(&data);
        let _ = next_link(&String::from_utf8_lossy(&data));
    }

    /// Any pattern text: parsed to a checked pattern or a ConfigError, never a panic; a parsed path is a valid
    /// repository path and its folder a prefix of it.
    #[test]
    fn any_pattern_parses_or_is_refused(tail in "[a-z@/%.*?\\[\\]!^~-]{0,40}", raw in proptest::collection::vec(any::<char>(), 0..20)) {
        for text in [format!("hf://datasets/{tail}"), format!("hf://datasets/org/n{tail}"), raw.iter().collect::<String>()] {
            match HfPattern::parse("p", &text) {
                Ok(p) => {
                    prop_assert!(check_repo_path(&p.path).is_ok());
                    prop_assert!(p.path.starts_with(p.folder()));
                    prop_assert!(!p.revision.is_empty());
                }
                Err(TrdataError::Config { .. }) => {}
                Err(e) => prop_assert!(false, "{e:?}"),
            }
        }
    }

    /// Globs of any text against any path: an answer, never a panic; a path always matches itself when it has
    /// no glob characters, and `**` matches everything.
    #[test]
    fn globs_take_any_text(pattern in "[a-c*?\\[\\]!/-]{0,16}", path in "[a-c/\\[\\]-]{0,16}") {
        let _ = glob_match(&pattern, &path);
        if !path.contains(['[', ']']) {
            prop_assert!(glob_match(&path, &path));
        }
        prop_assert!(glob_match("**", &path));
    }

    /// Content-Range values of any text: accepted only when they say exactly the range asked for.
    #[test]
    fn content_ranges_take_any_text(v in "bytes [0-9]{0,3}-[0-9]{0,3}/[0-9*]{0,3}", offset in 0u64..50, len in 1u64..50) {
        if check_content_range(Some(&v), offset, len, 100).is_ok() {
            let want = format!("bytes {}-{}/", offset, offset + len - 1);
            prop_assert!(v.starts_with(&want), "{} accepted for {}", v, want);
        }
    }
}
