//! Parse speed of `annot::coco` on a COCO-like file, and a dump of what it parsed (for cross-checks against
//! pycocotools). Also writes such files.
//!
//!     cargo run --release --example coco_parse -- --generate out.json [--mb 100] [--seed 1] [--keypoints]
//!     cargo run --release --example coco_parse -- FILE [--rounds 3] [--dump]
//!
//! The generated file has COCO's layout and proportions (instances_train2017.json: 448 MB, 118 k images,
//! 860 k annotations, ~520 bytes per annotation, mostly polygon coordinates with two decimals; ~1% crowd RLE):
//! image ids shuffled and sparse, some images without annotations, some orphans, compressed RLE too.
//! `--dump` prints one line per image, in the parsed order: `image_id file_name width height: ann_id ann_id ...`,
//! then `orphans N`. `--dump-json` prints everything parsed as one JSON object (floats in Rust's shortest
//! round-trip form, which Python's `float()` reads back to the same value): `{"images": [[id, file_name, width,
//! height, [annotation, ...]], ...], "orphans": N, "categories": [...]}`, an annotation being
//! `[id, image_id, category_id, iscrowd, area, bbox, segmentation, keypoints, num_keypoints]`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use trdata::annot::coco::{CocoAnnotation, CocoFile};
use trdata::annot::mask::Segmentation;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn coord(&mut self, max: u32) -> String {
        let v = self.below(u64::from(max) * 100);
        format!("{}.{:02}", v / 100, v % 100)
    }
}

fn generate(out: &Path, mb: u64, seed: u64, keypoints: bool) {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let target = mb << 20;
    // ~7.3 annotations per image, ~520 bytes each: images from the size.
    let n_images = (target / (520 * 73 / 10)).max(1);
    let mut ids: Vec<u64> = (0..n_images).map(|k| k * 3 + 1 + r.below(3)).collect();
    for k in (1..ids.len()).rev() {
        let j = r.below(k as u64 + 1) as usize;
        ids.swap(k, j);
    }
    let mut s = String::with_capacity(target as usize + (1 << 20));
    s.push_str(r#"{"info": {"description": "generated like COCO 2017","url": "http://cocodataset.org","version": "1.0","year": 2017,"contributor": "trdata","date_created": "2017/09/01"},"licenses": [{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/","id": 1,"name": "Attribution-NonCommercial-ShareAlike License"}],"images": ["#);
    let mut sizes = Vec::with_capacity(ids.len());
    for (k, id) in ids.iter().enumerate() {
        let (w, h) = (320 + r.below(321) as u32, 240 + r.below(241) as u32);
        sizes.push((w, h));
        if k > 0 {
            s.push(',');
        }
        write!(
            s,
            r#"{{"license": {},"file_name": "{id:012}.jpg","coco_url": "http://images.cocodataset.org/train2017/{id:012}.jpg","height": {h},"width": {w},"date_captured": "2013-11-14 16:28:13","flickr_url": "http://farm1.staticflickr.com/1/{id}_z.jpg","id": {id}}}"#,
            1 + r.below(8)
        )
        .unwrap();
    }
    s.push_str(r#"],"annotations": ["#);
    let mut ann_id = 1u64;
    let mut first = true;
    while (s.len() as u64) < target {
        let k = r.below(ids.len() as u64) as usize;
        // 1 in 500 annotations names an image that does not exist (an orphan); 1 in 8 images has none.
        let image_id = if r.below(500) == 0 { 7_000_000_000 + r.below(1000) } else { ids[k] };
        if ids[k].is_multiple_of(8) && image_id == ids[k] {
            continue;
        }
        let (w, h) = sizes[k];
        if !first {
            s.push(',');
        }
        first = false;
        let crowd = r.below(100) == 0;
        s.push_str(r#"{"segmentation": "#);
        if crowd {
            if r.below(2) == 0 {
                let n = 20 + r.below(200);
                let mut left = u64::from(w) * u64::from(h);
                s.push_str(r#"{"counts": ["#);
                for j in 0..n {
                    let c = if j + 1 == n { left } else { r.below((left / 4).max(1)) };
                    left -= c;
                    write!(s, "{}{c}", if j > 0 { "," } else { "" }).unwrap();
                }
                write!(s, r#"],"size": [{h},{w}]}}"#).unwrap();
            } else {
                s.push_str(r#"{"size": ["#);
                write!(s, "{h},{w}],\"counts\": \"").unwrap();
                for _ in 0..(40 + r.below(200)) {
                    let c = (48 + r.below(64)) as u8 as char;
                    if c == '\\' {
                        s.push_str("\\\\");
                    } else {
                        s.push(c);
                    }
                }
                s.push_str("\"}");
            }
        } else {
            s.push('[');
            let polys = 1 + r.below(100).saturating_sub(85) / 5;
            for p in 0..polys {
                if p > 0 {
                    s.push(',');
                }
                s.push('[');
                let pts = 3 + r.below(40);
                for j in 0..pts {
                    let (x, y) = (r.coord(w), r.coord(h));
                    write!(s, "{}{x},{y}", if j > 0 { "," } else { "" }).unwrap();
                }
                s.push(']');
            }
            s.push(']');
        }
        let (bx, by) = (r.coord(w / 2), r.coord(h / 2));
        let (bw, bh) = (r.coord(w / 2), r.coord(h / 2));
        write!(s, r#","area": {}.{},"iscrowd": {},"#, r.below(50000), r.below(10_000_000_000), u8::from(crowd))
            .unwrap();
        if keypoints {
            s.push_str(r#""keypoints": ["#);
            for j in 0..17 {
                let v = r.below(3);
                let (x, y) = if v == 0 { (0, 0) } else { (r.below(u64::from(w)), r.below(u64::from(h))) };
                write!(s, "{}{x},{y},{v}", if j > 0 { "," } else { "" }).unwrap();
            }
            write!(s, r#"],"num_keypoints": {},"#, r.below(18)).unwrap();
        }
        write!(
            s,
            r#""image_id": {image_id},"bbox": [{bx},{by},{bw},{bh}],"category_id": {},"id": {ann_id}}}"#,
            1 + r.below(90)
        )
        .unwrap();
        ann_id += 1 + r.below(2);
    }
    s.push_str(r#"],"categories": ["#);
    for c in 1..=90 {
        if c > 1 {
            s.push(',');
        }
        write!(s, r#"{{"supercategory": "super{}","id": {c},"name": "category {c}""#, c / 10).unwrap();
        if keypoints && c == 1 {
            s.push_str(r#","keypoints": ["nose","left_eye","right_eye","left_ear","right_ear","left_shoulder","right_shoulder","left_elbow","right_elbow","left_wrist","right_wrist","left_hip","right_hip","left_knee","right_knee","left_ankle","right_ankle"],"skeleton": [[16,14],[14,12],[17,15],[15,13],[12,13],[6,12],[7,13],[6,7],[6,8],[7,9],[8,10],[9,11],[2,3],[1,2],[1,3],[2,4],[3,5],[4,6],[5,7]]"#);
        }
        s.push('}');
    }
    s.push_str("]}");
    std::fs::write(out, &s).expect("write the generated file");
    eprintln!("wrote {} ({} bytes, {} images, ~{} annotation ids)", out.display(), s.len(), ids.len(), ann_id);
}

fn floats<T: std::fmt::Debug>(v: &[T]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", parts.join(","))
}

fn string(s: &str) -> String {
    let mut o = String::from('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => write!(o, "\\u{:04x}", c as u32).unwrap(),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn annotation_json(a: &CocoAnnotation) -> String {
    let seg = match &a.segmentation {
        None => "null".to_string(),
        Some(Segmentation::Polygons(p)) => format!("[{}]", p.iter().map(|q| floats(q)).collect::<Vec<_>>().join(",")),
        Some(Segmentation::Counts { size, counts }) => {
            format!("{{\"size\":{},\"counts\":{}}}", floats(size), floats(counts))
        }
        Some(Segmentation::Compressed { size, counts }) => {
            format!("{{\"size\":{},\"counts\":{}}}", floats(size), string(&String::from_utf8_lossy(counts)))
        }
    };
    let kp = a.keypoints.as_ref().map_or("null".to_string(), |k| floats(k));
    format!(
        "[{},{},{},{},{:?},{},{seg},{kp},{}]",
        a.id,
        a.image_id,
        a.category_id,
        u8::from(a.iscrowd),
        a.area,
        floats(&a.bbox),
        a.num_keypoints
    )
}

fn dump_json(f: &CocoFile) -> String {
    let mut out = String::from("{\"images\":[");
    for (k, im) in f.images().iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        let anns: Vec<String> = f.annotations_of(k).iter().map(annotation_json).collect();
        write!(out, "[{},{},{},{},[{}]]", im.id, string(&im.file_name), im.width, im.height, anns.join(",")).unwrap();
    }
    write!(out, "],\"orphans\":{},\"categories\":[", f.orphans()).unwrap();
    for (k, c) in f.categories().iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        let names: Vec<String> = c.keypoints.iter().map(|n| string(n)).collect();
        let edges: Vec<String> = c.skeleton.iter().map(|e| format!("[{},{}]", e[0], e[1])).collect();
        let (name, sup) = (string(&c.name), string(&c.supercategory));
        write!(out, "[{},{name},{sup},[{}],[{}]]", c.id, names.join(","), edges.join(",")).unwrap();
    }
    out.push_str("]}");
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    if let Some(out) = opt("--generate") {
        let mb = opt("--mb").map_or(100, |v| v.parse().expect("--mb N"));
        let seed = opt("--seed").map_or(1, |v| v.parse().expect("--seed N"));
        generate(Path::new(&out), mb, seed, args.iter().any(|a| a == "--keypoints"));
        return;
    }
    let Some(file) = args.first() else {
        eprintln!("usage: coco_parse FILE [--rounds N] [--dump] | --generate OUT [--mb N] [--seed N] [--keypoints]");
        std::process::exit(2);
    };
    let rounds: usize = opt("--rounds").map_or(1, |v| v.parse().expect("--rounds N"));
    let path = Path::new(file);
    let t = Instant::now();
    let bytes = std::fs::read(path).expect("read");
    let read_s = t.elapsed().as_secs_f64();
    let mut parsed = None;
    for round in 0..rounds {
        drop(parsed.take());
        let t = Instant::now();
        let f = CocoFile::parse(&bytes, path).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1);
        });
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "round {round}: parsed {} bytes in {s:.3} s = {:.0} MB/s ({} images, {} annotations, {} orphans, {} categories; read {read_s:.3} s)",
            bytes.len(),
            bytes.len() as f64 / s / 1e6,
            f.images().len(),
            f.annotations().len(),
            f.orphans(),
            f.categories().len()
        );
        parsed = Some(f);
    }
    if args.iter().any(|a| a == "--dump-json")
        && let Some(f) = &parsed
    {
        println!("{}", dump_json(f));
    }
    if args.iter().any(|a| a == "--dump")
        && let Some(f) = parsed
    {
        let mut out = String::new();
        for (k, im) in f.images().iter().enumerate() {
            write!(out, "{} {} {} {}:", im.id, im.file_name, im.width, im.height).unwrap();
            for a in f.annotations_of(k) {
                write!(out, " {}", a.id).unwrap();
            }
            out.push('\n');
        }
        writeln!(out, "orphans {}", f.orphans()).unwrap();
        print!("{out}");
    }
}
