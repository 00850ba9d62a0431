//! Tests of annot/coco: files in COCO's exact layout (every field and the order checked), what pycocotools
//! tolerates, what it does not (typed errors naming the file, the element's index and id), hostile files, the
//! number parser against Rust's correctly rounded `str::parse`, and mutated files that must never panic.

use super::*;
use proptest::prelude::*;
use std::path::PathBuf;

const PATH: &str = "/data/coco/annotations/instances_val2017.json";

fn path() -> PathBuf {
    PathBuf::from(PATH)
}

fn parse(json: &str) -> Result<CocoFile> {
    CocoFile::parse(json.as_bytes(), &path())
}

fn parse_lim(json: &str, lim: &CocoLimits) -> Result<CocoFile> {
    CocoFile::parse_with(json.as_bytes(), &path(), lim)
}

/// The message of a `Source` error about `PATH` (anything else fails the test).
fn message(r: Result<CocoFile>) -> String {
    match r {
        Err(TrdataError::Source { path: p, message }) => {
            assert_eq!(p, path());
            message
        }
        Err(e) => panic!("expected a Source error, got {e:?}"),
        Ok(f) => panic!("expected an error, parsed {} images", f.images().len()),
    }
}

fn err(json: &str) -> String {
    message(parse(json))
}

fn assert_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "message {msg:?} lacks {p:?}");
    }
}

/// A file in the layout of instances_val2017.json (key order, key set and value forms as COCO writes them),
/// with ids out of order, an image without annotations, an orphan annotation, unknown keys and the three
/// segmentation forms.
const INSTANCES: &str = r#"{"info": {"description": "COCO 2017 Dataset","url": "http://cocodataset.org","version": "1.0","year": 2017,"contributor": "COCO Consortium","date_created": "2017/09/01"},
"licenses": [{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/","id": 1,"name": "Attribution-NonCommercial-ShareAlike License"}],
"images": [
 {"license": 4,"file_name": "000000397133.jpg","coco_url": "http://images.cocodataset.org/val2017/000000397133.jpg","height": 427,"width": 640,"date_captured": "2013-11-14 17:02:52","flickr_url": "http://farm7.staticflickr.com/6116/6255196340_da26cf2c9e_z.jpg","id": 397133},
 {"license": 1,"file_name": "000000037777.jpg","coco_url": "http://images.cocodataset.org/val2017/000000037777.jpg","height": 230,"width": 352,"date_captured": "2013-11-14 20:55:31","flickr_url": "http://farm9.staticflickr.com/8429/7839199426_f6d48aa585_z.jpg","id": 37777},
 {"license": 4,"file_name": "000000252219.jpg","coco_url": "http://images.cocodataset.org/val2017/000000252219.jpg","height": 428,"width": 640,"date_captured": "2013-11-14 22:32:02","flickr_url": "http://farm4.staticflickr.com/3446/3232237447_13d84bd0a1_z.jpg","id": 252219}
],
"annotations": [
 {"segmentation": [[224.24,297.18,228.29,297.18,234.91,298.29,240.0,297.55],[10,20,30,40,50,60]],"area": 1481.3806499999994,"iscrowd": 0,"image_id": 397133,"bbox": [217.62,240.54,38.99,57.75],"category_id": 44,"id": 82445},
 {"segmentation": {"counts": [272,2,4,4,4,4,2,9,1,2],"size": [230,352]},"area": 6818,"iscrowd": 1,"image_id": 37777,"bbox": [0,34,56,97],"category_id": 1,"id": 900100037777},
 {"segmentation": {"size": [427,640],"counts": "ZQ4\\1j04M3L4N1N2O1O0"},"area": 310.5,"iscrowd": 1,"image_id": 397133,"bbox": [1.0,2.5,3,4],"category_id": 64,"id": 900100397133,"extra": {"nested": [1, {"a": null}]}},
 {"segmentation": [[1,1,5,1,5,5]],"area": 8.0,"iscrowd": 0,"image_id": 999,"bbox": [1,1,4,4],"category_id": 1,"id": 5},
 {"segmentation": [[0.5,0.5,2,0.5,2,2]],"area": 1.125,"iscrowd": 0,"image_id": 37777,"bbox": [0.5,0.5,1.5,1.5],"category_id": 3,"id": 7}
],
"categories": [{"supercategory": "person","id": 1,"name": "person"},{"supercategory": "vehicle","id": 3,"name": "car"},{"supercategory": "kitchen","id": 44,"name": "bottle"},{"supercategory": "furniture","id": 64,"name": "potted plant"}]}"#;

#[test]
fn instances_file_every_field_and_the_order() {
    let f = parse(INSTANCES).unwrap();
    // Images sorted by id (torchvision: sorted(coco.imgs.keys())).
    let ids: Vec<i64> = f.images().iter().map(|i| i.id).collect();
    assert_eq!(ids, [37777, 252219, 397133]);
    assert_eq!(f.images()[0], CocoImage { id: 37777, file_name: "000000037777.jpg".into(), width: 352, height: 230 });
    assert_eq!(f.images()[2], CocoImage { id: 397133, file_name: "000000397133.jpg".into(), width: 640, height: 427 });
    // Per image, in file order; the image without annotations has an empty range; the orphan is counted.
    let per: Vec<Vec<i64>> = (0..3).map(|k| f.annotations_of(k).iter().map(|a| a.id).collect()).collect();
    assert_eq!(per, [vec![900100037777, 7], vec![], vec![82445, 900100397133]]);
    assert_eq!(f.annotation_range(0), 0..2);
    assert_eq!(f.annotation_range(1), 2..2);
    assert_eq!(f.annotation_range(2), 2..4);
    assert_eq!(f.annotations().len(), 4);
    assert_eq!(f.orphans(), 1);
    for k in 0..3 {
        assert!(f.annotations_of(k).iter().all(|a| a.image_id == f.images()[k].id));
    }
    assert_eq!(f.image_index(252219), Some(1));
    assert_eq!(f.image_index(999), None);

    let a = &f.annotations()[2];
    assert_eq!(
        *a,
        CocoAnnotation {
            id: 82445,
            image_id: 397133,
            category_id: 44,
            bbox: [217.62, 240.54, 38.99, 57.75],
            area: 1481.3806499999994,
            iscrowd: false,
            segmentation: Some(Segmentation::Polygons(vec![
                vec![224.24, 297.18, 228.29, 297.18, 234.91, 298.29, 240.0, 297.55],
                vec![10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
            ])),
            keypoints: None,
            num_keypoints: 0,
        }
    );
    let crowd = &f.annotations()[0];
    assert!(crowd.iscrowd);
    assert_eq!(crowd.area, 6818.0);
    assert_eq!(crowd.bbox, [0.0, 34.0, 56.0, 97.0]);
    assert_eq!(
        crowd.segmentation,
        Some(Segmentation::Counts { size: [230, 352], counts: vec![272, 2, 4, 4, 4, 4, 2, 9, 1, 2] })
    );
    let compressed = &f.annotations()[3];
    assert_eq!(compressed.id, 900100397133);
    assert!(compressed.iscrowd);
    // The JSON escape "\\" is one backslash in the counts string.
    assert_eq!(
        compressed.segmentation,
        Some(Segmentation::Compressed { size: [427, 640], counts: b"ZQ4\\1j04M3L4N1N2O1O0".to_vec() })
    );
    assert_eq!(compressed.bbox, [1.0, 2.5, 3.0, 4.0]);
    assert_eq!(f.annotations()[1].area, 1.125);

    let names: Vec<(i64, &str, &str)> =
        f.categories().iter().map(|c| (c.id, c.name.as_str(), c.supercategory.as_str())).collect();
    assert_eq!(
        names,
        [(1, "person", "person"), (3, "car", "vehicle"), (44, "bottle", "kitchen"), (64, "potted plant", "furniture")]
    );
    assert!(f.categories().iter().all(|c| c.keypoints.is_empty() && c.skeleton.is_empty()));
}

const KEYPOINTS: &str = r#"{"info": {}, "licenses": [],
"images": [{"file_name": "a.jpg", "height": 480, "width": 640, "id": 2}, {"file_name": "b.jpg", "height": 10, "width": 20, "id": 1}],
"annotations": [
 {"segmentation": [[1,2,3,4,5,6]], "num_keypoints": 2, "area": 50, "iscrowd": 0, "keypoints": [10,20,2, 0,0,0, 30.5,40.25,1], "image_id": 2, "bbox": [1,2,3,4], "category_id": 1, "id": 11},
 {"segmentation": {"counts": [0, 200], "size": [10, 20]}, "num_keypoints": 0, "area": 0, "iscrowd": 1, "keypoints": [0,0,0, 0,0,0, 0,0,0], "image_id": 1, "bbox": [0,0,20,10], "category_id": 1, "id": 12},
 {"keypoints": [1,1,2, 2,2,0, 3,3,1], "image_id": 2, "bbox": [0,0,1,1], "category_id": 1, "id": 13}
],
"categories": [{"supercategory": "person", "id": 1, "name": "person", "keypoints": ["nose","left_eye","right_eye"], "skeleton": [[1,2],[1,3],[2,3]]}]}"#;

#[test]
fn keypoints_file_every_field() {
    let f = parse(KEYPOINTS).unwrap();
    assert_eq!(f.images().iter().map(|i| i.id).collect::<Vec<_>>(), [1, 2]);
    let c = &f.categories()[0];
    assert_eq!(c.keypoints, ["nose", "left_eye", "right_eye"]);
    assert_eq!(c.skeleton, [[1, 2], [1, 3], [2, 3]]);
    assert_eq!(f.annotations_of(0).iter().map(|a| a.id).collect::<Vec<_>>(), [12]);
    let a = &f.annotations_of(1)[0];
    assert_eq!(a.keypoints.as_deref(), Some(&[10.0, 20.0, 2.0, 0.0, 0.0, 0.0, 30.5, 40.25, 1.0][..]));
    assert_eq!(a.num_keypoints, 2);
    // Without num_keypoints: the triples with v > 0; without area: w × h; without iscrowd: false; no segmentation.
    let b = &f.annotations_of(1)[1];
    assert_eq!(b.id, 13);
    assert_eq!(b.num_keypoints, 2);
    assert_eq!(b.area, 1.0);
    assert!(!b.iscrowd);
    assert_eq!(b.segmentation, None);
    assert_eq!(
        f.annotations_of(0)[0].segmentation,
        Some(Segmentation::Counts { size: [10, 20], counts: vec![0, 200] })
    );
}

fn ann(fields: &str) -> String {
    format!(
        r#"{{"images": [{{"id": 1, "file_name": "x.jpg", "width": 4, "height": 3}}],
"annotations": [{{"image_id": 1, "bbox": [0,0,1,1], "category_id": 1, "id": 41}},
{{{fields}}}]}}"#
    )
}

fn one(fields: &str) -> CocoAnnotation {
    let f = parse(&ann(fields)).unwrap_or_else(|e| panic!("{fields}: {e}"));
    f.annotations()[1].clone()
}

#[test]
fn what_pycocotools_tolerates() {
    // Missing optional keys and null.
    let a =
        one(r#""image_id": 1, "bbox": [1,2,3,5], "category_id": 9, "id": 42, "segmentation": null, "keypoints": null"#);
    assert_eq!((a.area, a.iscrowd, a.segmentation, a.keypoints, a.num_keypoints), (15.0, false, None, None, 0));
    // Ids and integer fields written as integral floats; booleans for iscrowd.
    let a = one(r#""image_id": 1.0, "bbox": [1,2,3,5], "category_id": 9e0, "id": 4.2e1, "iscrowd": true"#);
    assert_eq!((a.id, a.image_id, a.category_id, a.iscrowd), (42, 1, 9, true));
    let a = one(r#""image_id": 1, "bbox": [1,2,3,5], "category_id": 1, "id": -9223372036854775808.0"#);
    assert_eq!(a.id, i64::MIN);
    let a = one(r#""image_id": 1, "bbox": [1,2,3,5], "category_id": 1, "id": -7, "iscrowd": false, "area": -0.0"#);
    assert_eq!((a.id, a.iscrowd), (-7, false));
    assert!(a.area == 0.0 && a.area.is_sign_negative());
    // Unknown keys anywhere, of any type, nested; NaN/Infinity/1e400 and lone surrogates where nobody reads them.
    let a = one(
        r#""x": NaN, "y": [Infinity, -Infinity, 1e400, "\ud800"], "image_id": 1, "z": {"a": {"b": [[[]]]}}, "bbox": [1,2,3,5], "category_id": 1, "id": 42, "caption": "a \"quoted\" caption""#,
    );
    assert_eq!(a.id, 42);
    // A repeated key: the last value wins (Python's json).
    let a = one(r#""image_id": 1, "bbox": [9,9,9,9], "category_id": 1, "id": 1, "bbox": [1,2,3,5], "id": 42"#);
    assert_eq!((a.id, a.bbox), (42, [1.0, 2.0, 3.0, 5.0]));
    // Escaped keys are the same keys.
    let a = one(r#""image_\u0069d": 1, "bbox": [1,2,3,5], "category_id": 1, "\u0069d": 42"#);
    assert_eq!(a.id, 42);
    // Polygons of any length (what they mean is the mask's business), an empty list of polygons.
    let a = one(r#""image_id": 1, "bbox": [1,2,3,5], "category_id": 1, "id": 42, "segmentation": [[1,2,3], []]"#);
    assert_eq!(a.segmentation, Some(Segmentation::Polygons(vec![vec![1.0, 2.0, 3.0], vec![]])));
    let a = one(r#""image_id": 1, "bbox": [1,2,3,5], "category_id": 1, "id": 42, "segmentation": []"#);
    assert_eq!(a.segmentation, Some(Segmentation::Polygons(vec![])));
    // Zero box sides are data (SanitizeBoundingBoxes drops them, as torchvision's references do), not errors;
    // negative ones are refused (boxes_that_would_reach_the_model_inverted_or_as_inf_are_refused).
    let a = one(r#""image_id": 1, "bbox": [5,5,0,0], "category_id": 1, "id": 42"#);
    assert_eq!(a.bbox, [5.0, 5.0, 0.0, 0.0]);
    // RLE with extra keys; whitespace everywhere JSON allows it.
    let a = one(
        " \"image_id\" :\t1 ,\r\n \"bbox\" : [ 1 , 2 , 3 , 5 ] , \"category_id\":1,\"id\":42,\"segmentation\":{ \"size\" : [ 3 , 4 ] , \"counts\" : [ ] , \"v\" : 1 } ",
    );
    assert_eq!(a.segmentation, Some(Segmentation::Counts { size: [3, 4], counts: vec![] }));
    // Keypoint visibilities 0, 1, 2, written as integers or integral floats.
    let a =
        one(r#""image_id": 1, "bbox": [1,2,3,5], "category_id": 1, "id": 42, "keypoints": [1,2,0, 3,4,1.0, 5,6,2]"#);
    assert_eq!((a.keypoints.unwrap().len(), a.num_keypoints), (9, 2));
}

#[test]
fn boxes_that_would_reach_the_model_inverted_or_as_inf_are_refused() {
    // A finite box whose x + w overflows float64, or whose corner is beyond float32 (what the model gets): inf.
    let cases: &[(&str, &str)] = &[
        ("[1e308, 0, 1e308, 1]", "x = 1e308 is beyond float32's range"), // x + width overflows float64
        ("[0, 0, 1e308, 1]", "x + width = 1e308 is beyond float32's range"),
        ("[0, -1e308, 1, 1]", "y = -1e308 is beyond float32's range"),
        ("[3e38, 0, 1e38, 1]", "x + width = 4e38 is beyond float32's range"),
        ("[0, 0, 1, 3.5e38]", "y + height = 3.5e38 is beyond float32's range"),
        ("[-3.5e38, 0, 1e38, 1]", "x = -3.5e38 is beyond float32's range"),
        // Inverted: a negative width or height (COCO's are sizes).
        ("[5, 5, -1, 2]", "bbox [5.0, 5.0, -1.0, 2.0] has a negative width or height"),
        ("[5, 5, 2, -0.5]", "has a negative width or height"),
    ];
    for (bbox, want) in cases {
        let m = err(&ann(&format!(r#""image_id": 1, "bbox": {bbox}, "category_id": 1, "id": 42"#)));
        assert_has(&m, &["annotation 1 (id 42): ", want, "(line 3, column "]);
    }
    // An orphan's box too (every box of the file is checked as it is read).
    let m = err(&ann(r#""image_id": 77, "bbox": [1e308, 0, 1e308, 1], "category_id": 1, "id": 42"#));
    assert_has(&m, &["annotation 1 (id 42): ", "x = 1e308"]);
    // Up to float32's largest, and -0.0 sides, are boxes.
    let a = one(r#""image_id": 1, "bbox": [3.4e38, -3.4e38, 0, -0.0], "category_id": 1, "id": 42"#);
    assert_eq!(a.bbox[0], 3.4e38);
    assert!(a.bbox.iter().all(|&v| (v as f32).is_finite()));
}

#[test]
fn keypoint_visibilities_other_than_cocos_are_refused() {
    for (v, shown) in [("7", "7.0"), ("-1", "-1.0"), ("0.5", "0.5"), ("3", "3.0"), ("1e30", "1e30")] {
        let kp = format!("[1,2,2, 3,4,{v}]");
        let m =
            err(&ann(&format!(r#""keypoints": {kp}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#)));
        assert_has(
            &m,
            &[
                "annotation 1 (id 42): ",
                &format!("keypoint 1's visibility is {shown}: COCO's are 0"),
                "(line 3, column ",
            ],
        );
    }
}

#[test]
fn an_rle_whose_size_is_not_its_images_is_refused_naming_the_annotation() {
    // The image is 4 wide, 3 high: an RLE's size is [height, width] = [3, 4].
    for seg in [
        r#"{"size": [4, 3], "counts": [12]}"#,
        r#"{"size": [3, 5], "counts": "<"}"#,
        r#"{"size": [2, 4], "counts": [8]}"#,
    ] {
        let m = err(&ann(&format!(
            r#""segmentation": {seg}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#
        )));
        assert_has(
            &m,
            &["annotation 1 (id 42): its RLE segmentation's size is [", "but its image 1 (\"x.jpg\") is [3, 4]"],
        );
    }
    // Its own image's size: kept (the runs are the mask code's to check); an orphan's: not checked (no image).
    let a = one(
        r#""segmentation": {"size": [3, 4], "counts": [12]}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
    );
    assert_eq!(a.segmentation, Some(Segmentation::Counts { size: [3, 4], counts: vec![12] }));
    let f = parse(&ann(r#""segmentation": {"size": [9, 9], "counts": [81]}, "image_id": 5, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#)).unwrap();
    assert_eq!(f.orphans(), 1);
}

#[test]
fn every_annotations_mask_names_the_annotation_when_it_is_no_mask_of_its_image() {
    let seg = |s: &str| {
        parse(&ann(&format!(r#""segmentation": {s}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#)))
            .unwrap()
    };
    // Good: polygons on the image's canvas, RLE of its size.
    let f = seg("[[0,0,3,0,3,2]]");
    assert_eq!((f.mask(1).unwrap().h, f.mask(1).unwrap().w), (3, 4));
    assert_eq!(seg(r#"{"size": [3, 4], "counts": [0, 12]}"#).mask(1).unwrap().counts, [0, 12]);
    // Bad, each named by id and image: runs that do not cover h·w, a compressed string that is none, polygons
    // pycocotools refuses, no segmentation.
    for (s, want) in [
        (r#"{"size": [3, 4], "counts": [5, 5]}"#, "runs sum to 10, not h·w = 3·4 = 12"),
        (r#"{"size": [3, 4], "counts": "~~"}"#, "Encoding"),
        ("[[1,2,3,4]]", "first polygon has 4 numbers"),
        ("[]", "empty polygon list"),
    ] {
        let m = seg(s).mask(1).unwrap_err();
        assert_has(&m, &["annotation id 42 (image 1) has a bad segmentation: ", want]);
    }
    assert_eq!(
        parse(&ann(r#""image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#)).unwrap().mask(1).unwrap_err(),
        "annotation id 42 (image 1) has no segmentation: masks need one"
    );
}

#[test]
fn missing_top_level_lists_are_empty_and_a_repeated_list_replaces() {
    let f = parse(r#"{"info": {"year": 2017}}"#).unwrap();
    assert!(f.images().is_empty() && f.annotations().is_empty() && f.categories().is_empty());
    assert_eq!(f.orphans(), 0);
    let f = parse(r#"{"annotations": [{"image_id": 1, "bbox": [0,0,1,1], "category_id": 1, "id": 1}]}"#).unwrap();
    assert_eq!((f.annotations().len(), f.orphans()), (0, 1));
    // Annotations before images (key order is free).
    let f = parse(
        r#"{"annotations": [{"image_id": 3, "bbox": [0,0,1,1], "category_id": 1, "id": 1}], "images": [{"id": 3, "file_name": "a", "width": 1, "height": 1}]}"#,
    )
    .unwrap();
    assert_eq!(f.annotations_of(0).len(), 1);
    let f = parse(
        r#"{"images": [{"id": 1, "file_name": "a", "width": 1, "height": 1}], "images": [{"id": 2, "file_name": "b", "width": 1, "height": 1}]}"#,
    )
    .unwrap();
    assert_eq!(f.images().iter().map(|i| i.id).collect::<Vec<_>>(), [2]);
}

#[test]
fn duplicates_identical_are_what_pycocotools_makes_of_them_different_are_refused() {
    let im = r#"{"id": 5, "file_name": "a.jpg", "width": 2, "height": 2, "coco_url": "u1"}"#;
    let im_b = r#"{"id": 5, "file_name": "a.jpg", "width": 2, "height": 2, "coco_url": "u2"}"#;
    let an = r#"{"image_id": 5, "bbox": [0,0,1,1], "category_id": 1, "id": 9}"#;
    // An exact duplicate image (in the fields kept) is one image; an exact duplicate annotation is kept twice
    // (getAnnIds lists it twice, loadAnns returns the same content twice).
    let f = parse(&format!(r#"{{"images": [{im}, {im_b}], "annotations": [{an}, {an}]}}"#)).unwrap();
    assert_eq!(f.images().len(), 1);
    assert_eq!(f.annotations_of(0).iter().map(|a| a.id).collect::<Vec<_>>(), [9, 9]);
    // Images that share an id but differ: refused, naming both.
    let other = r#"{"id": 5, "file_name": "b.jpg", "width": 2, "height": 2}"#;
    let m = err(&format!(r#"{{"images": [{im}, {{"id": 6, "file_name": "c", "width": 1, "height": 1}}, {other}]}}"#));
    assert_has(&m, &["images 0 and 2 share id 5", "a.jpg", "b.jpg"]);
    // Annotations that share an id but differ.
    let an2 = r#"{"image_id": 5, "bbox": [0,0,1,2], "category_id": 1, "id": 9}"#;
    let m = err(&format!(r#"{{"images": [{im}], "annotations": [{an}, {an}, {an2}]}}"#));
    assert_has(&m, &["annotations 1 and 2 share id 9 but differ"]);
    // Categories likewise.
    let m = err(r#"{"categories": [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]}"#);
    assert_has(&m, &["categories 0 and 1 share id 1", "\"a\"", "\"b\""]);
    let f = parse(r#"{"categories": [{"id": 1, "name": "a"}, {"id": 1, "name": "a"}]}"#).unwrap();
    assert_eq!(f.categories().len(), 2);
}

#[test]
fn refused_annotations_name_the_file_the_index_and_the_id_written_after_the_error() {
    // COCO writes "id" last: the error in an earlier field must still name it.
    let cases: &[(&str, &str)] = &[
        (r#""bbox": [1,2,3], "image_id": 1, "category_id": 1, "id": 42"#, "bbox has 3 numbers"),
        (r#""bbox": [1,2,3,4,5], "image_id": 1, "category_id": 1, "id": 42"#, "bbox has more than 4 numbers"),
        (r#""bbox": "1 2 3 4", "image_id": 1, "category_id": 1, "id": 42"#, "bbox must be a list"),
        (
            r#""bbox": [1,2,"3",4], "image_id": 1, "category_id": 1, "id": 42"#,
            "a bbox value must be a finite number, found the string \"3\"",
        ),
        (r#""bbox": [1,2,NaN,4], "image_id": 1, "category_id": 1, "id": 42"#, "found NaN"),
        (r#""bbox": [1,2,Infinity,4], "image_id": 1, "category_id": 1, "id": 42"#, "found Infinity"),
        (r#""bbox": [1,2,-Infinity,4], "image_id": 1, "category_id": 1, "id": 42"#, "found the number -Infinity"),
        (
            r#""bbox": [1,2,1e400,4], "image_id": 1, "category_id": 1, "id": 42"#,
            "must be a finite number, found the number 1e400",
        ),
        (r#""bbox": [1,2,-1e400,4], "image_id": 1, "category_id": 1, "id": 42"#, "found the number -1e400"),
        (r#""bbox": [1,2,"NaN",4], "image_id": 1, "category_id": 1, "id": 42"#, "found the string \"NaN\""),
        (r#""bbox": null, "image_id": 1, "category_id": 1, "id": 42"#, "bbox must be a list of 4 numbers"),
        (r#""image_id": "1", "bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "image_id must be an integer"),
        (
            r#""image_id": 1.5, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "image_id must be an integer that fits 64 bits, found the number 1.5",
        ),
        (r#""image_id": 1e19, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "fits 64 bits"),
        (r#""image_id": 9223372036854775808.0, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "fits 64 bits"),
        (r#""image_id": 9223372036854775808, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "fits 64 bits"),
        (r#""image_id": 99999999999999999999, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "fits 64 bits"),
        (
            r#""image_id": true, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "image_id must be an integer, found the boolean true",
        ),
        (
            r#""image_id": 1, "bbox": [1,2,3,4], "category_id": [1], "id": 42"#,
            "category_id must be an integer, found a list",
        ),
        (
            r#""iscrowd": 2, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "iscrowd must be 0 or 1, found 2",
        ),
        (r#""iscrowd": "0", "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "iscrowd must be 0 or 1"),
        (
            r#""area": "big", "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "area must be a finite number",
        ),
        (
            r#""area": NaN, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "area must be a finite number, found NaN",
        ),
        (
            r#""segmentation": [1,2,3,4,5,6], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "flat [x0, y0, ...] list?",
        ),
        (
            r#""segmentation": [[1,2,[3]]], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "a polygon coordinate must be a finite number, found a list",
        ),
        (r#""segmentation": [[1,2,NaN]], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "found NaN"),
        (
            r#""segmentation": 5, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "segmentation must be a list of polygons",
        ),
        (
            r#""segmentation": "abc", "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "segmentation must be",
        ),
        (
            r#""segmentation": {"counts": [1,2]}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "needs both \"size\"",
        ),
        (
            r#""segmentation": {"size": [1,2]}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "needs both",
        ),
        (
            r#""segmentation": {"size": [1,2,3], "counts": []}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "RLE size has more than 2",
        ),
        (
            r#""segmentation": {"size": [-1,2], "counts": []}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "an RLE size must be in 0..=4294967295, found -1",
        ),
        (
            r#""segmentation": {"size": [1,2], "counts": [1,-2]}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "an RLE count must be in 0..=4294967295, found -2",
        ),
        (
            r#""segmentation": {"size": [1,2], "counts": [4294967296]}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "found 4294967296",
        ),
        (
            r#""segmentation": {"size": [1,2], "counts": [1.5]}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "an RLE count must be an integer",
        ),
        (
            r#""segmentation": {"size": [1,2], "counts": 7}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "RLE counts must be a list of run lengths or a compressed RLE string",
        ),
        (
            r#""segmentation": {"size": [1,2], "counts": "a\udc00b"}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "lone surrogate escape \\udc00",
        ),
        (
            r#""keypoints": [1,2,2,3], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "keypoints has 4 numbers, not a multiple of 3",
        ),
        (
            r#""keypoints": [1,2,1e39], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "does not fit a 32-bit float",
        ),
        (
            r#""keypoints": {"x": 1}, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "keypoints must be a list of numbers",
        ),
        (
            r#""num_keypoints": -1, "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
            "num_keypoints must be in 0..=4294967295",
        ),
        // Missing required keys (still named by index and id).
        (r#""image_id": 1, "category_id": 1, "id": 42"#, "has no \"bbox\""),
        (r#""bbox": [1,2,3,4], "category_id": 1, "id": 42"#, "has no \"image_id\""),
        (r#""image_id": 1, "bbox": [1,2,3,4], "id": 42"#, "has no \"category_id\""),
    ];
    for (fields, want) in cases {
        let m = err(&ann(fields));
        assert_has(&m, &["annotation 1 (id 42): ", want, "(line 3, column "]);
    }
    let m = err(&ann(r#""image_id": 1, "bbox": [1,2,3,4], "category_id": 1"#));
    assert_has(&m, &["annotation 1 (no id): has no \"id\""]);
    // The id as written, even when it is the wrong thing.
    let m = err(&ann(r#""image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": "a-7""#));
    assert_has(&m, &["annotation 1 (id \"a-7\"): id must be an integer, found the string \"a-7\""]);
    // An annotation that is not an object.
    let m = err(r#"{"annotations": [{"image_id": 1, "bbox": [0,0,1,1], "category_id": 1, "id": 1}, [1, 2]]}"#);
    assert_has(&m, &["annotation 1: annotation must be an object, found a list"]);
    let m = err(r#"{"annotations": {"image_id": 1}}"#);
    assert_has(&m, &["annotations must be a list of annotation objects, found an object"]);
    let m = err(r#"{"annotations": null}"#);
    assert_has(&m, &["annotations must be a list", "found null"]);
}

#[test]
fn refused_images_and_categories_name_index_and_id() {
    let img = |fields: &str| {
        format!(r#"{{"images": [{{"id": 1, "file_name": "a", "width": 1, "height": 1}}, {{{fields}}}]}}"#)
    };
    let cases: &[(&str, &str)] = &[
        (r#""file_name": "b", "width": 0, "height": 3, "id": 7"#, "width must be a positive integer (pixels), found 0"),
        (r#""file_name": "b", "width": -640, "height": 3, "id": 7"#, "found -640"),
        (
            r#""file_name": "b", "width": 640.5, "height": 3, "id": 7"#,
            "width must be an integer that fits 64 bits, found the number 640.5",
        ),
        (r#""file_name": "b", "width": 4294967296, "height": 3, "id": 7"#, "width must be a positive integer"),
        (
            r#""file_name": "b", "width": "640", "height": 3, "id": 7"#,
            "width must be an integer, found the string \"640\"",
        ),
        (r#""file_name": "b", "width": 5, "height": NaN, "id": 7"#, "height must be an integer, found NaN"),
        (r#""file_name": 5, "width": 5, "height": 3, "id": 7"#, "file_name must be a string, found the number 5"),
        (r#""file_name": "b\ud800", "width": 5, "height": 3, "id": 7"#, "lone surrogate"),
        (r#""width": 5, "height": 3, "id": 7"#, "has no \"file_name\""),
        (r#""file_name": "b", "height": 3, "id": 7"#, "has no \"width\""),
        (r#""file_name": "b", "width": 3, "id": 7"#, "has no \"height\""),
    ];
    for (fields, want) in cases {
        let m = err(&img(fields));
        assert_has(&m, &["image 1 (id 7): ", want]);
    }
    let m = err(&img(r#""file_name": "b", "width": 3, "height": 3"#));
    assert_has(&m, &["image 1 (no id): has no \"id\""]);
    let m = err(&img(r#""file_name": "b", "width": 3, "height": 3, "id": "000000397133""#));
    assert_has(&m, &["image 1 (id \"000000397133\"): id must be an integer, found the string"]);

    let cat = |fields: &str| format!(r#"{{"categories": [{{{fields}}}]}}"#);
    let cases: &[(&str, &str)] = &[
        (r#""name": 1, "id": 3"#, "name must be a string"),
        (r#""name": "p", "keypoints": "nose", "id": 3"#, "keypoints must be a list of keypoint names"),
        (r#""name": "p", "keypoints": ["nose", 2], "id": 3"#, "a keypoint name must be a string, found the number 2"),
        (r#""name": "p", "skeleton": [[1,2],[3]], "id": 3"#, "a skeleton edge has 1 numbers, not 2"),
        (r#""name": "p", "skeleton": [[1,2,3]], "id": 3"#, "a skeleton edge has more than 2 numbers"),
        (r#""name": "p", "skeleton": [[1,-2]], "id": 3"#, "a skeleton keypoint number must be in 0..=4294967295"),
        (r#""name": "p", "skeleton": [1,2], "id": 3"#, "a skeleton edge must be a pair"),
    ];
    for (fields, want) in cases {
        let m = err(&cat(fields));
        assert_has(&m, &["category 0 (id 3): ", want]);
    }
    let m = err(&cat(r#""name": "p""#));
    assert_has(&m, &["category 0 (no id): has no \"id\""]);
    let f = parse(&cat(r#""id": 3, "keypoints": null, "skeleton": null"#)).unwrap();
    assert_eq!(f.categories()[0], CocoCategory { id: 3, ..CocoCategory::default() });
}

#[test]
fn not_a_coco_file() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "invalid JSON: the file is empty"),
        (b" \n\t ", "invalid JSON: the file is empty"),
        (b"<html><body>404</body></html>", "invalid JSON: not JSON: expected '{', found \"<\""),
        (b"hello", "invalid JSON: not JSON"),
        (b"[]", "the top level is a list, not an object"),
        (b"[{\"image_id\": 1, \"bbox\": [1,2,3,4], \"score\": 0.9}]", "a top-level list is a results file"),
        (b"null", "the top level must be an object"),
        (b"42", "the top level must be an object"),
        (b"\"images\"", "the top level must be an object"),
        (b"{} {}", "invalid JSON: extra data after the top-level object"),
        (b"{}x", "extra data"),
        (b"\xEF\xBB\xBF{}", "byte order mark"),
        (
            b"{\"images\": [], \"info\": \"caf\xC3\"}",
            "invalid JSON: bytes that are not UTF-8 (line 1, column 28, byte 27)",
        ),
        (b"{\"images\": [{\"file_name\": \"\xFF.jpg\"}]}", "not UTF-8"),
        (b"{\"info\": \"a\x01b\"}", "control character 0x01 in a string"),
        (b"{\"info\": \"a\\xb\"}", "invalid escape"),
        (b"{\"info\": \"\\u12G4\"}", "4 hex digits"),
        (b"{\"info\": [1,]}", "expected a JSON value, found \"]\""),
        (b"{\"info\": [1 2]}", "expected ',' or ']'"),
        (b"{\"info\": {\"a\" 1}}", "expected ':' after a key"),
        (b"{\"info\": {a: 1}}", "expected a key"),
        (b"{\"info\": 01}", "expected ',' or '}' in an object, found the number 1"), // Python: Expecting ',' delimiter
        (b"{\"info\": 1.}", "a digit must follow '.'"),
        (b"{\"info\": .5}", "expected a JSON value"),
        (b"{\"info\": +1}", "expected a JSON value"),
        (b"{\"info\": 1e}", "a digit must follow the exponent"),
        (b"{\"info\": nan}", "expected a JSON value"),
        (b"{\"info\": -NaN}", "invalid number"),
        (b"{\"info\": inf}", "expected a JSON value"),
        (b"{\"info\": -inf}", "invalid number"),
        (b"{\"info\": True}", "expected a JSON value"),
        (b"{\"info\": nul}", "expected a JSON value"),
        (b"{'images': []}", "expected a key"),
        (b"{\"images\": [], }", "expected a key"),
    ];
    for (bytes, want) in cases {
        let m = message(CocoFile::parse(bytes, &path()));
        assert_has(&m, &[want]);
    }
    // What Python's json accepts where nobody reads it, so do we.
    for ok in [
        &b"{\"info\": [NaN, Infinity, -Infinity, 1e400, -1e-400, 0, -0, 0.0e+0, 1E5, \"\\ud800\\u00e9\\/\"]}"[..],
        b" {}\n",
        b"{\"images\": []}",
    ] {
        CocoFile::parse(ok, &path()).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(ok)));
    }
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let full = KEYPOINTS.as_bytes();
    for n in 0..full.len() {
        let r = CocoFile::parse(&full[..n], &path());
        // A prefix that ends right after the top-level object's '}' does not exist (it is the last byte);
        // every other prefix is cut inside the object.
        let m = message(r);
        assert!(m.contains("invalid JSON") || m.contains("must be") || m.contains("has "), "{n}: {m}");
    }
    parse(KEYPOINTS).unwrap();
}

#[test]
fn nesting_is_bounded_without_recursion() {
    for depth in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 1_000_000] {
        let json = format!("{{\"info\": {}{}}}", "[".repeat(depth), "]".repeat(depth));
        let r = parse(&json);
        if depth < MAX_DEPTH {
            r.unwrap();
        } else {
            assert_has(&message(r), &["nested deeper than 512 levels"]);
        }
    }
    // Deep nesting where a polygon should be: the type error, then the skip finds the depth (and names the id).
    let deep = format!("\"segmentation\": [{}{}], \"id\": 42", "[".repeat(100_000), "]".repeat(100_000));
    let m = err(&ann(&deep));
    assert_has(&m, &["annotation 1: invalid JSON: lists/objects nested deeper than 512 levels"]);
    let objects = format!("{{\"info\": {}1{}}}", "{\"a\":".repeat(200_000), "}".repeat(200_000));
    assert_has(&err(&objects), &["nested deeper"]);
}

#[test]
fn limits_stop_the_list_that_exceeds_them() {
    let lim = CocoLimits {
        max_images: 2,
        max_annotations: 3,
        max_categories: 1,
        max_polygons: 2,
        max_polygon_coords: 6,
        max_rle_counts: 4,
        max_keypoint_values: 6,
        max_category_list: 2,
        max_string_bytes: 8,
        ..CocoLimits::default()
    };
    let img = |n: usize| {
        let v: Vec<String> =
            (0..n).map(|k| format!(r#"{{"id": {k}, "file_name": "f", "width": 1, "height": 1}}"#)).collect();
        format!(r#"{{"images": [{}]}}"#, v.join(","))
    };
    parse_lim(&img(2), &lim).unwrap();
    assert_has(
        &message(parse_lim(&img(3), &lim)),
        &["images has more than 2 entries, the limit (CocoLimits::max_images)"],
    );
    let anns = |n: usize| {
        let v: Vec<String> =
            (0..n).map(|k| format!(r#"{{"image_id": 0, "bbox": [0,0,1,1], "category_id": 1, "id": {k}}}"#)).collect();
        format!(r#"{{"annotations": [{}]}}"#, v.join(","))
    };
    parse_lim(&anns(3), &lim).unwrap();
    assert_has(&message(parse_lim(&anns(4), &lim)), &["annotations has more than 3 entries", "max_annotations"]);
    assert_has(
        &message(parse_lim(r#"{"categories": [{"id": 1}, {"id": 2}]}"#, &lim)),
        &["categories has more than 1 entries", "max_categories"],
    );
    let one_ann = |fields: &str| {
        format!(r#"{{"annotations": [{{{fields}, "image_id": 0, "bbox": [0,0,1,1], "category_id": 1, "id": 77}}]}}"#)
    };
    let cases: &[(&str, &str)] = &[
        (
            r#""segmentation": [[1,2],[3,4],[5,6]]"#,
            "segmentation has more than 2 entries, the limit (CocoLimits::max_polygons)",
        ),
        (r#""segmentation": [[1,2,3,4],[5,6,7]]"#, "more than 6 polygon coordinates"),
        (r#""segmentation": {"counts": [1,2,3,4,5], "size": [1, 15]}"#, "RLE counts has more than 4 entries"),
        (
            r#""segmentation": {"counts": "abcde", "size": [1, 15]}"#,
            "compressed RLE counts (CocoLimits::max_rle_counts) is longer than the limit of 4 bytes",
        ),
        (r#""segmentation": {"counts": "ab\\\\\\\\", "size": [1, 15]}"#, "longer than the limit of 4 bytes"),
        (r#""keypoints": [1,2,2,3,4,2,5,6,2]"#, "keypoints has more than 6 entries"),
    ];
    for (fields, want) in cases {
        assert_has(&message(parse_lim(&one_ann(fields), &lim)), &["annotation 0 (id 77): ", want]);
    }
    // At the limit is fine: 4 escaped bytes are 4 bytes.
    parse_lim(&one_ann(r#""segmentation": {"counts": "ab\\\\", "size": [1, 15]}, "keypoints": [1,2,2,3,4,2]"#), &lim)
        .unwrap();
    assert_has(
        &message(parse_lim(r#"{"images": [{"id": 1, "file_name": "123456789", "width": 1, "height": 1}]}"#, &lim)),
        &["image 0 (id 1): file_name is longer than the limit of 8 bytes"],
    );
    // The limit counts unescaped bytes: 8 escapes of one byte each fit.
    let f = parse_lim(
        r#"{"images": [{"id": 1, "file_name": "\u0041\u0042\u0043\u0044\u0045\u0046\u0047\u0048", "width": 1, "height": 1}]}"#,
        &lim,
    )
    .unwrap();
    assert_eq!(f.images()[0].file_name, "ABCDEFGH");
    assert_has(
        &message(parse_lim(r#"{"categories": [{"id": 1, "keypoints": ["a", "b", "c"]}]}"#, &lim)),
        &["category 0 (id 1): keypoints has more than 2 entries", "max_category_list"],
    );
    assert_has(
        &message(parse_lim(r#"{"categories": [{"id": 1, "skeleton": [[1,2],[1,2],[1,2]]}]}"#, &lim)),
        &["skeleton has more than 2 entries"],
    );
    // The file and the memory estimate.
    let small = CocoLimits { max_file_bytes: 10, ..CocoLimits::default() };
    assert_has(&message(parse_lim(r#"{"images": []}"#, &small)), &["14 bytes, more than the limit of 10 bytes"]);
    let small = CocoLimits { max_memory_bytes: 1000, ..CocoLimits::default() };
    let big = format!(
        r#""segmentation": [[{}]], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
        vec!["1"; 200].join(",")
    );
    assert_has(
        &message(CocoFile::parse_with(ann(&big).as_bytes(), &path(), &small)),
        &["more than 1000 bytes", "max_memory_bytes"],
    );
}

#[test]
fn a_polygon_list_past_the_default_limit_is_refused_and_named() {
    let lim = CocoLimits::default();
    let n = lim.max_polygon_coords + 1;
    let mut coords = String::with_capacity(2 * n);
    for k in 0..n {
        coords.push_str(if k == 0 { "0" } else { ",0" });
    }
    let fields =
        format!(r#""segmentation": [[{coords}]], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#);
    let m = err(&ann(&fields));
    assert_has(&m, &["annotation 1 (id 42): segmentation has more than 1048576 polygon coordinates"]);
    // One fewer parses.
    let fields = format!(
        r#""segmentation": [[{}]], "image_id": 1, "bbox": [1,2,3,4], "category_id": 1, "id": 42"#,
        &coords[2..]
    );
    let f = parse(&ann(&fields)).unwrap();
    match &f.annotations()[1].segmentation {
        Some(Segmentation::Polygons(p)) => assert_eq!(p[0].len(), lim.max_polygon_coords),
        other => panic!("{other:?}"),
    }
}

#[test]
fn strings_are_unescaped_as_python_does() {
    let f = parse(
        r#"{"images": [{"id": 1, "file_name": "dir\/caf\u00e9 \"x\"\\\ud83d\ude00\t.jpg", "width": 1, "height": 1}], "categories": [{"id": 1, "name": "naïve", "supercategory": ""}]}"#,
    )
    .unwrap();
    assert_eq!(f.images()[0].file_name, "dir/café \"x\"\\😀\t.jpg");
    assert_eq!(f.categories()[0].name, "naïve");
    // A lone low surrogate, a high surrogate followed by a non-surrogate escape.
    for bad in [r#""\udc00""#, r#""\ud800\u0041""#, r#""\ud800""#] {
        let m = err(&format!(r#"{{"images": [{{"id": 1, "file_name": {bad}, "width": 1, "height": 1}}]}}"#));
        assert_has(&m, &["image 0 (id 1): file_name has a lone surrogate escape"]);
    }
}

#[test]
fn errors_give_line_and_column() {
    let m = err("{\n  \"images\": [\n    {\"id\": 1, \"file_name\": \"a\", \"width\": 0, \"height\": 1}\n  ]\n}");
    assert_has(
        &m,
        &["image 0 (id 1): width must be a positive integer (pixels), found 0 (line 3, column 42, byte 57)"],
    );
    assert!(m.starts_with("image 0"), "{m}");
    let e = parse("{\n\"info\": [1 2]}").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{PATH}: invalid JSON: expected ',' or ']' in a list, found the number 2 (line 2, column 12, byte 13)")
    );
}

#[test]
fn numbers_are_exact() {
    for t in [
        "0",
        "-0",
        "1",
        "-1",
        "0.1",
        "0.30000000000000004",
        "224.24",
        "1481.3806499999994",
        "9007199254740993",
        "9007199254740992.5",
        "1e22",
        "1e23",
        "123456789012345678901234567890",
        "0.000000000000000000000000001",
        "1.7976931348623157e308",
        "1.7976931348623159e308",
        "4.9e-324",
        "2.4703282292062327e-324",
        "2.4703282292062328e-324",
        "1e-400",
        "1e400",
        "-1e400",
        "1234567890123456789",
        "12345678901234567890",
        "0.1e1",
        "100000000000000000000000",
        "3.14159265358979323846264338327950288",
    ] {
        let n = num(t).unwrap();
        let want = python_float(t);
        assert_eq!(n.f.to_bits(), want.to_bits(), "{t}: {} != {want}", n.f);
    }
    assert_eq!(num("9223372036854775807").unwrap().int, Some(i64::MAX));
    assert_eq!(num("-9223372036854775808").unwrap().int, Some(i64::MIN));
    assert_eq!(num("9223372036854775808").unwrap().int, None);
    assert_eq!(num("10000000000000000000").unwrap().int, None);
    assert_eq!(num("-0").unwrap().int, Some(0));
    assert!(num("-0").unwrap().f.is_sign_positive() && num("-0.0").unwrap().f.is_sign_negative());
    assert_eq!(simple_number(b"224.24,", 0), Some((224.24, 6)));
    assert_eq!(simple_number(b"-3]", 0), Some((-3.0, 2)));
    for declined in [&b"1e5"[..], b"01", b"1.", b"-", b"", b"1234567890123456789", b"9007199254740993", b"NaN"] {
        assert_eq!(simple_number(declined, 0), None, "{}", String::from_utf8_lossy(declined));
    }
    assert_eq!(num("1.0").unwrap().int, None);
    assert!(num("-Infinity").unwrap().f == f64::NEG_INFINITY);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn number_parser_matches_std(
        neg in any::<bool>(), int in "(0|[1-9][0-9]{0,24})", frac in proptest::option::of("[0-9]{1,25}"),
        exp in proptest::option::of((prop_oneof![Just(""), Just("+"), Just("-")], 0u32..400)),
    ) {
        let mut t = String::new();
        if neg { t.push('-'); }
        t.push_str(&int);
        if let Some(f) = &frac { t.push('.'); t.push_str(f); }
        if let Some((sign, e)) = &exp { t.push_str(&format!("e{sign}{e}")); }
        let n = num(&t).unwrap();
        let want = python_float(&t);
        prop_assert_eq!(n.f.to_bits(), want.to_bits(), "{}", t);
        if frac.is_none() && exp.is_none() {
            let exact: Option<i64> = t.parse::<i64>().ok();
            prop_assert_eq!(n.int, exact, "{}", t);
        }
    }

    #[test]
    fn number_parser_matches_std_on_short_decimals(t in "-?(0|[1-9][0-9]{0,8})(\\.[0-9]{1,9})?") {
        let n = num(&t).unwrap();
        prop_assert_eq!(n.f.to_bits(), python_float(&t).to_bits(), "{}", t);
        // At most 15 digits: below 2^53, always the fast path.
        let digits = t.bytes().filter(u8::is_ascii_digit).count();
        prop_assert!(digits > 15 || simple_number(t.as_bytes(), 0).is_some(), "{}", t);
    }

    #[test]
    fn number_parser_matches_std_on_doubles(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
        for t in [format!("{x}"), format!("{x:e}"), format!("{x:.3}")] {
            let n = num(&t).unwrap();
            prop_assert_eq!(n.f.to_bits(), python_float(&t).to_bits(), "{}", t);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Mutated files: never a panic; whatever parses satisfies the invariants.

fn check_invariants(f: &CocoFile) {
    let ids: Vec<i64> = f.images().iter().map(|i| i.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "images not sorted/unique: {ids:?}");
    let mut end = 0;
    for (k, id) in ids.iter().enumerate() {
        let r = f.annotation_range(k);
        assert_eq!(r.start, end);
        end = r.end;
        assert!(f.annotations_of(k).iter().all(|a| a.image_id == *id));
    }
    assert_eq!(end, f.annotations().len());
    for im in f.images() {
        assert!(im.width > 0 && im.height > 0);
    }
    for (k, im) in f.images().iter().enumerate() {
        for a in f.annotations_of(k) {
            assert_box_rle_and_keypoints(a, im);
        }
    }
}

/// What the parser guarantees of one kept annotation of `image`: a box of sides >= 0 whose corners are finite in
/// float32, a finite area, keypoint triples of finite values with a visibility of 0, 1 or 2, finite polygon
/// coordinates, an RLE of the image's size.
fn assert_box_rle_and_keypoints(a: &CocoAnnotation, image: &CocoImage) {
    let [x, y, w, h] = a.bbox;
    assert!(w >= 0.0 && h >= 0.0 && a.area.is_finite(), "{a:?}");
    assert!([x, y, x + w, y + h].iter().all(|&v| (v as f32).is_finite()), "{a:?}");
    if let Some(k) = &a.keypoints {
        assert_eq!(k.len() % 3, 0);
        assert!(k.iter().all(|v| v.is_finite()));
        assert!(k.chunks_exact(3).all(|t| [0.0, 1.0, 2.0].contains(&t[2])), "{k:?}");
    }
    match &a.segmentation {
        Some(Segmentation::Polygons(p)) => assert!(p.iter().flatten().all(|v| v.is_finite())),
        Some(Segmentation::Counts { size, .. } | Segmentation::Compressed { size, .. }) => {
            assert_eq!(*size, [image.height, image.width]);
        }
        None => {}
    }
}

fn small_limits() -> CocoLimits {
    CocoLimits {
        max_images: 50,
        max_annotations: 50,
        max_categories: 20,
        max_polygons: 8,
        max_polygon_coords: 64,
        max_rle_counts: 64,
        max_keypoint_values: 60,
        max_category_list: 20,
        max_string_bytes: 64,
        max_memory_bytes: 1 << 20,
        ..CocoLimits::default()
    }
}

/// Parse `bytes` under small limits; on success check the invariants and that a re-parse is identical.
fn parse_checked(bytes: &[u8]) {
    let lim = small_limits();
    if let Ok(f) = CocoFile::parse_with(bytes, &path(), &lim) {
        check_invariants(&f);
        assert_eq!(CocoFile::parse_with(bytes, &path(), &lim).unwrap(), f);
        for a in 0..f.annotations().len() {
            let _ = f.mask(a); // made or refused with a message
        }
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Truncate(usize),
    Delete(usize, usize),
    Splice(usize, usize, usize),
    Insert(usize, &'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let tokens = prop::sample::select(vec![
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        "\"",
        "\\",
        "NaN",
        "-Infinity",
        "1e400",
        "null",
        "true",
        "-",
        "0",
        "1.5",
        "\"id\": 1",
        "\"bbox\":",
        "\"segmentation\": [[",
        "\"counts\": \"",
        "\"size\": [1,1]",
        "\\ud800",
        "\u{ff}",
        "\u{0}",
        "[[[[[[[[",
        "\"images\": [",
        "\"annotations\": [",
        "\"keypoints\": [1,2,3]",
        "\"keypoints\": [1,2,2]",
        "-1",
        "1e308",
        "3.5e38",
        "\"size\": [230,352]",
        "\"size\": [10,20]",
        "\"counts\": [0, 200]",
    ]);
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(p, x)| Mutation::Flip(p, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, x)| Mutation::Set(p, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0usize..40).prop_map(|(p, n)| Mutation::Delete(p, n)),
        (any::<usize>(), any::<usize>(), 0usize..80).prop_map(|(a, b, n)| Mutation::Splice(a, b, n)),
        (any::<usize>(), tokens).prop_map(|(p, t)| Mutation::Insert(p, t)),
    ]
}

fn apply(base: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut v = base.to_vec();
    for m in muts {
        let n = v.len().max(1);
        match *m {
            Mutation::Flip(p, x) => {
                if !v.is_empty() {
                    v[p % n] ^= x;
                }
            }
            Mutation::Set(p, x) => {
                if !v.is_empty() {
                    v[p % n] = x;
                }
            }
            Mutation::Truncate(p) => v.truncate(p % n),
            Mutation::Delete(p, k) => {
                let a = p % n;
                let b = (a + k).min(v.len());
                if a < b {
                    v.drain(a..b);
                }
            }
            Mutation::Splice(a, b, k) => {
                // Copy a slice of the file to another place (duplicates keys, elements, closes lists early).
                let a = a % n;
                let src: Vec<u8> = v.iter().skip(a).take(k).copied().collect();
                let at = b % (v.len() + 1);
                v.splice(at..at, src);
            }
            Mutation::Insert(p, t) => {
                let at = p % (v.len() + 1);
                v.splice(at..at, t.bytes());
            }
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(30_000))]

    #[test]
    fn mutated_files_never_panic(base in 0usize..2, muts in prop::collection::vec(mutation(), 1..6)) {
        let file = [INSTANCES, KEYPOINTS][base].as_bytes();
        parse_checked(&apply(file, &muts));
    }
}

#[test]
fn the_base_files_satisfy_the_invariants() {
    for f in [INSTANCES, KEYPOINTS] {
        let f = CocoFile::parse_with(f.as_bytes(), &path(), &small_limits()).unwrap();
        check_invariants(&f);
    }
}

/// What Python's `float(json.loads(text))` is: an integer literal is an int first, so "-0" is +0.0.
fn python_float(text: &str) -> f64 {
    let v: f64 = text.parse().unwrap();
    let int_literal = !text.contains(['.', 'e', 'E']);
    if int_literal && v == 0.0 { 0.0 } else { v }
}

// ---------------------------------------------------------------------------------------------------------------
// Numbers: the parser's value against Rust's correctly rounded parse (= Python's float()).

fn num(text: &str) -> PResult<Num> {
    let lim = CocoLimits::default();
    let mut p = Parser { lx: Lexer::new(text.as_bytes()), lim: &lim, mem: 0, scratch: Scratch::default() };
    let n = p.number()?;
    assert_eq!(p.lx.i, text.len(), "{text}: stopped at {}", p.lx.i);
    // The fast path for the common forms (taken by `finite`) gives the same bits, or declines.
    if let Some((v, j)) = simple_number(text.as_bytes(), 0) {
        assert_eq!((v.to_bits(), j), (n.f.to_bits(), text.len()), "{text}: simple_number disagrees");
    }
    Ok(n)
}
