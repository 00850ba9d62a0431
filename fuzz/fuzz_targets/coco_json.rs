//! The COCO annotation parser (annot/coco.rs) on hostile bytes, under small limits (so one input cannot make a
//! run allocate much). Three kinds of input, chosen by the first byte:
//! - raw: the bytes are a whole file;
//! - annotation: the bytes are the inside of one annotation object of a valid file (fields, values, nesting),
//!   so the schema checks are reached at once;
//! - spliced: the bytes are inserted at a position (from the second byte) of a valid file in COCO's layout.
//! Nothing may panic, and whatever parses must satisfy the structure's invariants: images sorted by id and
//! unique, each image's annotations one contiguous range whose `image_id` is the image's, every number finite,
//! boxes of sides >= 0 with corners finite in float32, keypoints in triples with visibilities 0, 1 or 2, RLEs of
//! their image's size, every list within its limit, every mask made or refused, and a second parse identical.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use trdata::annot::coco::{CocoFile, CocoLimits};
use trdata::annot::mask::Segmentation;

const BASE: &str = r#"{"info": {"year": 2017}, "images": [{"file_name": "b.jpg", "height": 10, "width": 20, "id": 9}, {"file_name": "a.jpg", "height": 4, "width": 5, "id": 2}],
"annotations": [{"segmentation": [[1.5,2,3,4,5,6]], "area": 3.5, "iscrowd": 0, "image_id": 9, "bbox": [1,2,3,4], "category_id": 1, "id": 1},
{"segmentation": {"counts": [0, 20], "size": [4, 5]}, "iscrowd": 1, "image_id": 2, "bbox": [0,0,5,4], "category_id": 2, "id": 2},
{"segmentation": {"size": [10, 20], "counts": "04\\1"}, "keypoints": [1,2,2,0,0,0], "num_keypoints": 1, "image_id": 9, "bbox": [0,0,1,1], "category_id": 1, "id": 3}],
"categories": [{"supercategory": "p", "id": 1, "name": "person", "keypoints": ["a", "b"], "skeleton": [[1,2]]}, {"id": 2, "name": "x"}]}"#;

fn limits() -> CocoLimits {
    CocoLimits {
        max_file_bytes: 1 << 20,
        max_memory_bytes: 4 << 20,
        max_images: 1000,
        max_annotations: 1000,
        max_categories: 100,
        max_polygons: 16,
        max_polygon_coords: 256,
        max_rle_counts: 256,
        max_keypoint_values: 60,
        max_category_list: 20,
        max_string_bytes: 64,
    }
}

fn check(f: &CocoFile, lim: &CocoLimits) {
    let ids: Vec<i64> = f.images().iter().map(|i| i.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let mut end = 0;
    for (k, im) in f.images().iter().enumerate() {
        assert!(im.width > 0 && im.height > 0 && im.file_name.len() <= lim.max_string_bytes);
        let r = f.annotation_range(k);
        assert_eq!(r.start, end);
        end = r.end;
        assert!(f.annotations_of(k).iter().all(|a| a.image_id == im.id));
        assert_eq!(f.image_index(im.id), Some(k));
    }
    assert_eq!(end, f.annotations().len());
    assert!(f.images().len() <= lim.max_images && f.categories().len() <= lim.max_categories);
    assert!(f.annotations().len() as u64 + f.orphans() <= lim.max_annotations as u64);
    for (i, a) in f.annotations().iter().enumerate() {
        let im = &f.images()[f.image_index(a.image_id).unwrap()];
        let [x, y, w, h] = a.bbox;
        // Box sides >= 0, corners finite as float32 (what the model gets), keypoint visibilities COCO's.
        assert!(w >= 0.0 && h >= 0.0 && a.area.is_finite());
        assert!([x, y, x + w, y + h].iter().all(|&v| (v as f32).is_finite()));
        if let Some(k) = &a.keypoints {
            assert!(k.len() % 3 == 0 && k.len() <= lim.max_keypoint_values && k.iter().all(|v| v.is_finite()));
            assert!(k.chunks_exact(3).all(|t| [0.0, 1.0, 2.0].contains(&t[2])));
        }
        match &a.segmentation {
            Some(Segmentation::Polygons(p)) => {
                assert!(p.len() <= lim.max_polygons);
                assert!(p.iter().map(Vec::len).sum::<usize>() <= lim.max_polygon_coords);
                assert!(p.iter().flatten().all(|v| v.is_finite()));
            }
            // An RLE is of its image's size.
            Some(Segmentation::Counts { counts, size }) => {
                assert!(counts.len() <= lim.max_rle_counts && *size == [im.height, im.width]);
            }
            Some(Segmentation::Compressed { counts, size }) => {
                assert!(counts.len() <= lim.max_rle_counts && *size == [im.height, im.width]);
            }
            None => {}
        }
        // A segmentation's mask is made or refused with a message, never a panic.
        let _ = f.mask(i);
    }
    for c in f.categories() {
        assert!(c.keypoints.len() <= lim.max_category_list && c.skeleton.len() <= lim.max_category_list);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else { return };
    let file: Vec<u8> = match kind % 3 {
        0 => rest.to_vec(),
        1 => {
            let mut v =
                br#"{"images": [{"id": 1, "file_name": "x", "width": 3, "height": 2}], "annotations": [{"#.to_vec();
            v.extend_from_slice(rest);
            v.extend_from_slice(br#"}], "categories": [{"id": 1}]}"#);
            v
        }
        _ => {
            let Some((&pos, rest)) = rest.split_first() else { return };
            let base = BASE.as_bytes();
            let at = usize::from(pos) * base.len() / 256;
            let mut v = base[..at].to_vec();
            v.extend_from_slice(rest);
            v.extend_from_slice(&base[at..]);
            v
        }
    };
    let lim = limits();
    let path = Path::new("fuzz.json");
    if let Ok(f) = CocoFile::parse_with(&file, path, &lim) {
        check(&f, &lim);
        assert!(CocoFile::parse_with(&file, path, &lim).unwrap() == f);
    }
});
