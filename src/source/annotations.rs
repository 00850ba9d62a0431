//! source/annotations — annotation files of detection and segmentation sources, read as every source reads a file
//! (read.rs: regular files only, never blocking on a FIFO, never more than the limit) and parsed by annot/.

use super::read::read_regular;
use crate::annot::coco::{CocoFile, CocoLimits};
use crate::error::{Result, TrdataError};
use std::path::Path;

/// Read and parse the COCO annotation file `path` under `limits` (annot/coco.rs): a `SourceError` naming the
/// file when it cannot be read (not a regular file, over `limits.max_file_bytes`, missing) or parsed.
pub fn coco_file(path: &Path, limits: &CocoLimits) -> Result<CocoFile> {
    let mut bytes = Vec::new();
    read_regular(path, limits.max_file_bytes, &mut bytes).map_err(|e| TrdataError::Source {
        path: path.to_path_buf(),
        message: format!("cannot be read as a COCO file: {}", e.message),
    })?;
    CocoFile::parse_with(&bytes, path, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"{"images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 3}], "annotations": []}"#;

    #[test]
    fn coco_files_are_read_only_when_regular_and_never_past_the_limit() {
        let open = |p: &Path| coco_file(p, &CocoLimits::default());
        let dir = crate::test_data::fresh_dir("coco-open");
        let p = dir.join("instances.json");
        std::fs::write(&p, SMALL).unwrap();
        assert_eq!(open(&p).unwrap(), CocoFile::parse(SMALL.as_bytes(), &p).unwrap());
        // A 10 GB file (sparse): refused from its length, before anything is read or allocated.
        let big = dir.join("huge.json");
        std::fs::File::create(&big).unwrap().set_len(10 << 30).unwrap();
        let t = std::time::Instant::now();
        let e = open(&big).unwrap_err();
        assert!(t.elapsed().as_secs() < 2);
        assert!(
            matches!(&e, TrdataError::Source { path, message } if *path == big && message.contains("10737418240 bytes exceeds the limit of 4294967296")),
            "{e}"
        );
        let e = coco_file(&p, &CocoLimits { max_file_bytes: 10, ..CocoLimits::default() }).unwrap_err();
        assert!(e.to_string().contains("exceeds the limit of 10 bytes"), "{e}");
        // Not regular files.
        assert!(open(&dir).unwrap_err().to_string().contains("is a directory, not a regular file"));
        assert!(open(Path::new("/dev/zero")).unwrap_err().to_string().contains("character device"));
        let fifo = dir.join("pipe.json");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(coco_file(&f2, &CocoLimits::default()).map(|_| ()).map_err(|e| e.to_string()));
        });
        let r = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("open blocked on a FIFO");
        assert!(r.unwrap_err().contains("FIFO"));
        let e = open(&dir.join("missing.json")).unwrap_err();
        assert!(matches!(&e, TrdataError::Source { message, .. } if message.contains("cannot be read")), "{e}");
    }
}

/// Each image's boxes (XYXY, source pixels), grouped by image: image `i`'s are `boxes[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxTable {
    offsets: Vec<usize>,
    boxes: Vec<[f64; 4]>,
}

impl BoxTable {
    /// A table for `images` images from `offsets` (`images + 1`, non-decreasing, from 0 to `boxes.len()`): the
    /// message says what is wrong otherwise.
    pub fn new(images: usize, offsets: Vec<usize>, boxes: Vec<[f64; 4]>) -> std::result::Result<Self, String> {
        if offsets.len() != images + 1
            || offsets.first() != Some(&0)
            || offsets.last() != Some(&boxes.len())
            || offsets.windows(2).any(|w| w[0] > w[1])
        {
            return Err(format!(
                "box offsets must be {} non-decreasing numbers from 0 to {} (one more than the images)",
                images + 1,
                boxes.len()
            ));
        }
        Ok(Self { offsets, boxes })
    }

    /// Image `i`'s boxes.
    pub fn of(&self, i: usize) -> &[[f64; 4]] {
        &self.boxes[self.offsets[i]..self.offsets[i + 1]]
    }
}
