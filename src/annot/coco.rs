//! annot/coco — COCO annotation files (`instances_*.json`, `person_keypoints_*.json`), parsed with bounded
//! allocations into a checked, compact structure: the images in the order torchvision's `CocoDetection` visits
//! them (`sorted(coco.imgs.keys())`), each image's annotations as one contiguous range in file order (what
//! `coco.loadAnns(coco.getAnnIds(id))` returns), and the categories in file order.
//!
//! # The parser
//! A small streaming parser written for this schema (no serde), on the core's one JSON lexer (json/, which the
//! packed metadata reads with too): it walks the file once, keeps only the fields [`CocoImage`], [`CocoAnnotation`]
//! and [`CocoCategory`] hold, and skips every other value without allocating (the lexer's iterative skipper:
//! nesting costs no stack). Why not `serde_json`:
//! - Python's `json` (what pycocotools reads with) accepts `NaN`, `Infinity` and `-Infinity`, and turns `1e400`
//!   into `inf`; pycocotools tolerates them in the keys it ignores (`info`, `licenses`, unknown keys), so the
//!   skipper must too, while a known field must refuse them with a message that names the field: serde_json
//!   refuses the tokens wherever they are, with a syntax error;
//! - floats must be parsed exactly as Python's `float()` (correctly rounded; serde_json's default parser may be
//!   off by one unit in the last place, its exact mode is slower): the lexer's fast exact path (Clinger: a
//!   mantissa below 2^53 times a power of ten up to 10^22, one rounding) and `str::parse` otherwise;
//! - every limit is counted where the value is read, and an error inside an annotation names its index *and* its
//!   `id`, which COCO writes last in each object: after an error in a field the parser skips that value, reads
//!   on to the object's end for the `id`, then reports; with serde the id would be out of reach.
//!
//! # Tolerated as pycocotools tolerates it
//! Unknown keys anywhere (ignored), missing `images`/`annotations`/`categories` (empty), missing optional
//! annotation keys (`area`: the bbox's `w × h`, as pycocotools' `loadRes` computes it for boxes; `iscrowd`: 0;
//! `segmentation`, `keypoints`: `None`, also for `null`; `num_keypoints`: the keypoints with visibility > 0),
//! missing category keys (`name`/`supercategory`: empty; `keypoints`/`skeleton`: empty), ids written as floats
//! with an integral value (`7.0`: Python's dict treats `7.0` and `7` as one key), a repeated key (the last value
//! wins, as in Python's `json`; but a wrong value is refused even where a repeat would replace it), annotations
//! whose `image_id` names no image (no image's; counted in [`CocoFile::orphans`]), `category_id`s that name no
//! category, and exact duplicates of an image entry (one image, as `coco.imgs` is a dict) or of an annotation or
//! category (kept twice, as pycocotools' lists keep them).
//!
//! # Refused (a `TrdataError::Source` naming the file, the element's index and id, and line/column)
//! What pycocotools crashes on or resolves arbitrarily: a top level that is not an object; a missing `id`,
//! `image_id`, `category_id` or `bbox` in an annotation, a missing `id`, `file_name`, `width` or `height` in an
//! image, a missing category `id`; wrong types; a bbox that is not 4 finite numbers; `width`/`height` ≤ 0 or not
//! integral; a bbox with a negative width or height (an inverted box: COCO's are sizes; pycocotools computes
//! nonsense areas and IoUs from them, torchvision's models refuse them), or whose corners `x`, `y`, `x + width`,
//! `y + height` are beyond float32's range (the model's boxes are float32: they would be `inf` there, `x + width`
//! may even overflow float64); a keypoint visibility other than 0, 1, 2 (COCO's: not labeled, labeled but not
//! visible, visible); an RLE segmentation whose `size` is not its image's `[height, width]` (pycocotools decodes
//! it at its own size: the mask would be misplaced or cut; orphans' are not checked);
//! `iscrowd` other than 0/1/false/true; ids that are not integers or do not fit `i64` (string ids
//! included: trdata ids are `i64`); two images, two annotations or two categories that share an id but differ
//! (pycocotools' dicts keep the last one silently: a different file for the image, another annotation's content
//! for the first one in `loadAnns`); keypoints whose length is not a multiple of 3; a segmentation that is neither
//! a list of number lists nor `{size, counts}`; any number that is not finite (`NaN`, `Infinity`, `1e400`) in a
//! known field; strings with a lone surrogate escape (not representable as UTF-8); bytes that are not UTF-8
//! (Python's `open` refuses them too), a byte order mark, anything that is not JSON, a truncated file, data after
//! the top-level object.
//!
//! # Not checked while parsing
//! What a segmentation means is the mask code's (annot/mask.rs), asked by [`CocoFile::mask`] (which a source with
//! masks calls for every annotation when it is made): RLE counts that do not sum to `h × w`, polygons pycocotools
//! refuses, the compressed string's alphabet (a polygon of odd length loses its last number and one of fewer than
//! 3 points is empty, as in pycocotools). Nor are skeleton indices checked against the keypoint names, or keypoint
//! counts against a category.
//!
//! # Limits
//! [`CocoLimits`]: every count and length that comes from the file is checked while it is read (before the
//! element it would add is stored), as is an estimate of the memory the parsed structure takes; nesting is limited
//! to [`MAX_DEPTH`]; `source::coco_file` reads regular files only, at most `max_file_bytes` (source/read.rs's bounded reader). A list past its limit
//! stops being stored at once; the rest of that annotation is skipped without allocating (linear time, bounded by
//! the file size) so that the error can name the annotation's id, and then the parse ends.

use std::ops::Range;
use std::path::Path;

use super::mask::{Rle, Segmentation, to_rle};
use crate::error::{Result, TrdataError};
use crate::json::{self, Lexer, Num, Surrogates, SyntaxError, UnescapeError, simple_number, snippet};

/// Deepest nesting of lists/objects accepted anywhere in the file (the COCO schema uses 5 levels): the lexer's
/// ([`json::MAX_DEPTH`]), whose skipper is iterative, so this costs no stack.
pub const MAX_DEPTH: usize = json::MAX_DEPTH;

/// The bounds a COCO file is checked against while it is parsed. The defaults admit the public COCO-format datasets
/// with room to spare (COCO train2017: ~450 MB, 118,287 images, 860,001 annotations; LVIS and Objects365 are a few
/// times larger) and bound what a hostile file can make the parser allocate: each list is counted as it is read
/// and refused at the first element past its limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CocoLimits {
    /// Largest file `source::coco_file` reads (and [`CocoFile::parse_with`] accepts). Default 4 GiB.
    pub max_file_bytes: u64,
    /// Largest estimated size of the parsed structure (struct sizes plus every coordinate, run, keypoint and
    /// string byte; the index arrays built at the end, at most 24 bytes per annotation, come on top).
    /// Default 16 GiB: a 4 GiB file of minimal polygons (`0,` is 2 bytes, an `f64` 8) could otherwise ask for
    /// ~16-32 GiB.
    pub max_memory_bytes: u64,
    /// Most entries in `images`. Default 2^24 (16.7 M; COCO has 118 k, Objects365 1.7 M).
    pub max_images: usize,
    /// Most entries in `annotations` (orphans included). Default 2^26 (67 M; COCO has 860 k, Objects365 25 M);
    /// never more than `u32::MAX` (the per-image ranges are `u32`).
    pub max_annotations: usize,
    /// Most entries in `categories`. Default 2^20 (COCO 80, LVIS 1,203).
    pub max_categories: usize,
    /// Most polygons in one annotation's segmentation. Default 2^16.
    pub max_polygons: usize,
    /// Most coordinates (x and y counted apart) in one annotation's polygons, all polygons together.
    /// Default 2^20 (524,288 points, 8 MiB of `f64`).
    pub max_polygon_coords: usize,
    /// Most runs in one uncompressed RLE (`counts` list), and most bytes in one compressed RLE string.
    /// Default 2^24 (a 4096 × 4096 mask alternating every pixel).
    pub max_rle_counts: usize,
    /// Most numbers in one annotation's `keypoints` (3 per keypoint). Default 2^14 (COCO: 51, COCO-WholeBody: 399).
    pub max_keypoint_values: usize,
    /// Most keypoint names, and most skeleton edges, of one category. Default 2^12.
    pub max_category_list: usize,
    /// Longest string kept (a `file_name`, a category or keypoint name), in bytes after unescaping.
    /// Default 4096 (Linux `PATH_MAX`: a longer file name cannot be opened).
    pub max_string_bytes: usize,
}

impl Default for CocoLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 4 << 30,
            max_memory_bytes: 16 << 30,
            max_images: 1 << 24,
            max_annotations: 1 << 26,
            max_categories: 1 << 20,
            max_polygons: 1 << 16,
            max_polygon_coords: 1 << 20,
            max_rle_counts: 1 << 24,
            max_keypoint_values: 1 << 14,
            max_category_list: 1 << 12,
            max_string_bytes: 4096,
        }
    }
}

/// One entry of `images`: the fields a data loader needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CocoImage {
    /// `id`, unique in the file (exact duplicates of an entry are merged).
    pub id: i64,
    /// `file_name`, relative to the image folder, as the file writes it.
    pub file_name: String,
    /// `width` in pixels, > 0.
    pub width: u32,
    /// `height` in pixels, > 0.
    pub height: u32,
}

/// One entry of `annotations`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CocoAnnotation {
    /// `id`.
    pub id: i64,
    /// `image_id`: the image it belongs to.
    pub image_id: i64,
    /// `category_id` (not required to name an entry of `categories`, as in pycocotools).
    pub category_id: i64,
    /// `bbox`: `[x, y, width, height]` in pixels, as the file writes it (finite; not clamped).
    pub bbox: [f64; 4],
    /// `area` (finite); `bbox[2] * bbox[3]` when the file has none.
    pub area: f64,
    /// `iscrowd` (0/false or 1/true; false when missing).
    pub iscrowd: bool,
    /// `segmentation` in one of its three forms; `None` when missing or `null`.
    pub segmentation: Option<Segmentation>,
    /// `keypoints`: `x, y, v` triples (finite, as `f32`); `None` when missing or `null`.
    pub keypoints: Option<Vec<f32>>,
    /// `num_keypoints`; when missing, the number of keypoint triples with `v > 0` (COCO's definition).
    pub num_keypoints: u32,
}

/// One entry of `categories`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CocoCategory {
    /// `id`.
    pub id: i64,
    /// `name` (empty when missing).
    pub name: String,
    /// `supercategory` (empty when missing).
    pub supercategory: String,
    /// `keypoints`: the keypoint names of a person_keypoints file (empty otherwise).
    pub keypoints: Vec<String>,
    /// `skeleton`: edges between keypoints, 1-based indices into `keypoints` as COCO writes them (not checked
    /// against `keypoints`).
    pub skeleton: Vec<[u32; 2]>,
}

/// A parsed COCO annotation file. Invariants (established by the parser, kept by having no mutators):
/// `images` sorted by id, ids unique; `annotations` grouped by image in the order of `images`, in file order
/// within one image, every one's `image_id` the id of its image; orphans are counted, not kept.
#[derive(Debug, Clone, PartialEq)]
pub struct CocoFile {
    images: Vec<CocoImage>,
    annotations: Vec<CocoAnnotation>,
    /// `offsets[k]..offsets[k + 1]`: the annotations of `images[k]`; `images.len() + 1` entries.
    offsets: Vec<u32>,
    categories: Vec<CocoCategory>,
    orphans: u64,
}

impl CocoFile {
    /// Parse the bytes of a COCO file with the default [`CocoLimits`]; `path` names the file in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self> {
        Self::parse_with(bytes, path, &CocoLimits::default())
    }

    /// Parse the bytes of a COCO file under `limits`; `path` names the file in errors.
    pub fn parse_with(bytes: &[u8], path: &Path, limits: &CocoLimits) -> Result<Self> {
        let source = |message: String| TrdataError::Source { path: path.to_path_buf(), message };
        if bytes.len() as u64 > limits.max_file_bytes {
            return Err(source(format!(
                "the COCO file is {} bytes, more than the limit of {} bytes (CocoLimits::max_file_bytes)",
                bytes.len(),
                limits.max_file_bytes
            )));
        }
        let mut p = Parser { lx: Lexer::new(bytes), lim: limits, mem: 0, scratch: Scratch::default() };
        let mut raw = Raw::default();
        p.file(&mut raw).map_err(|f| f.into_error(bytes, path))?;
        finish(raw).map_err(|f| f.into_error(bytes, path))
    }

    /// The images, sorted by id: torchvision `CocoDetection`'s order (`sorted(coco.imgs.keys())`).
    pub fn images(&self) -> &[CocoImage] {
        &self.images
    }

    /// Every annotation that belongs to an image, grouped by image in the order of [`images`](Self::images).
    pub fn annotations(&self) -> &[CocoAnnotation] {
        &self.annotations
    }

    /// The indices into [`annotations`](Self::annotations) of `images()[k]`'s annotations, in file order.
    ///
    /// # Panics
    /// If `k >= images().len()`.
    pub fn annotation_range(&self, k: usize) -> Range<usize> {
        self.offsets[k] as usize..self.offsets[k + 1] as usize
    }

    /// The annotations of `images()[k]`, in file order (`coco.loadAnns(coco.getAnnIds(imgIds=id))`).
    ///
    /// # Panics
    /// If `k >= images().len()`.
    pub fn annotations_of(&self, k: usize) -> &[CocoAnnotation] {
        &self.annotations[self.annotation_range(k)]
    }

    /// The index in [`images`](Self::images) of the image with `id`.
    pub fn image_index(&self, id: i64) -> Option<usize> {
        self.images.binary_search_by_key(&id, |im| im.id).ok()
    }

    /// The categories, in file order.
    pub fn categories(&self) -> &[CocoCategory] {
        &self.categories
    }

    /// How many annotations name an `image_id` that no image has (no image's: not in
    /// [`annotations`](Self::annotations)).
    pub fn orphans(&self) -> u64 {
        self.orphans
    }

    /// The mask of `annotations()[a]` on its image, as pycocotools' `COCO.annToRLE` makes it ([`to_rle`]), or
    /// what is wrong, naming the annotation (id and image): no segmentation, or one that is no mask of the image
    /// (annot/mask.rs's checks: RLE runs that do not cover it, polygons pycocotools refuses, bounds).
    ///
    /// # Panics
    /// If `a >= annotations().len()`.
    pub fn mask(&self, a: usize) -> std::result::Result<Rle, String> {
        let ann = &self.annotations[a];
        let image = &self.images[self.image_index(ann.image_id).expect("an annotation kept has its image")];
        let seg = ann.segmentation.as_ref().ok_or_else(|| {
            format!("annotation id {} (image {}) has no segmentation: masks need one", ann.id, image.id)
        })?;
        to_rle(seg, image.height, image.width)
            .map_err(|e| format!("annotation id {} (image {}) has a bad segmentation: {e}", ann.id, image.id))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Failures inside the parser

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailKind {
    /// Not JSON (what Python's `json` refuses too): never recovered from.
    Syntax,
    /// JSON, but not what the schema allows (or beyond a limit): inside an element, the parser skips the value
    /// and reads on to the element's end for its id.
    Schema,
    /// An allocation failed.
    Memory(u64),
}

#[derive(Debug)]
struct Fail {
    kind: FailKind,
    /// Byte offset the failure is reported at.
    at: usize,
    what: String,
    /// The element: "annotation 17 (id 42)"; empty at the top level.
    ctx: String,
}

type PResult<T> = std::result::Result<T, Fail>;

/// `Fail::at` of a failure that has no one place in the file (two elements that conflict).
const NO_POS: usize = usize::MAX;

fn syntax(at: usize, what: impl Into<String>) -> Fail {
    Fail { kind: FailKind::Syntax, at, what: what.into(), ctx: String::new() }
}

fn schema(at: usize, what: impl Into<String>) -> Fail {
    Fail { kind: FailKind::Schema, at, what: what.into(), ctx: String::new() }
}

impl From<SyntaxError> for Fail {
    fn from(e: SyntaxError) -> Self {
        syntax(e.at, e.what)
    }
}

impl Fail {
    fn into_error(self, s: &[u8], path: &Path) -> TrdataError {
        let ctx = if self.ctx.is_empty() { String::new() } else { format!("{}: ", self.ctx) };
        if let FailKind::Memory(bytes) = self.kind {
            return TrdataError::Memory { what: format!("{ctx}{} of {}", self.what, path.display()), bytes };
        }
        let kind = if self.kind == FailKind::Syntax { "invalid JSON: " } else { "" };
        if self.at == NO_POS {
            return TrdataError::Source { path: path.to_path_buf(), message: format!("{ctx}{kind}{}", self.what) };
        }
        let at = self.at.min(s.len());
        let (line, column) = json::line_column(s, at);
        TrdataError::Source {
            path: path.to_path_buf(),
            message: format!("{ctx}{kind}{} (line {line}, column {column}, byte {at})", self.what),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The parser

/// The keys the schema knows (any context); everything else is `Other` and skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Images,
    Annotations,
    Categories,
    Id,
    ImageId,
    CategoryId,
    Bbox,
    Area,
    Iscrowd,
    Segmentation,
    Keypoints,
    NumKeypoints,
    FileName,
    Width,
    Height,
    Name,
    Supercategory,
    Skeleton,
    Size,
    Counts,
    Other,
}

#[inline]
fn classify_plain(k: &[u8]) -> Key {
    match k {
        b"images" => Key::Images,
        b"annotations" => Key::Annotations,
        b"categories" => Key::Categories,
        b"id" => Key::Id,
        b"image_id" => Key::ImageId,
        b"category_id" => Key::CategoryId,
        b"bbox" => Key::Bbox,
        b"area" => Key::Area,
        b"iscrowd" => Key::Iscrowd,
        b"segmentation" => Key::Segmentation,
        b"keypoints" => Key::Keypoints,
        b"num_keypoints" => Key::NumKeypoints,
        b"file_name" => Key::FileName,
        b"width" => Key::Width,
        b"height" => Key::Height,
        b"name" => Key::Name,
        b"supercategory" => Key::Supercategory,
        b"skeleton" => Key::Skeleton,
        b"size" => Key::Size,
        b"counts" => Key::Counts,
        _ => Key::Other,
    }
}

#[derive(Default)]
struct Raw {
    images: Vec<CocoImage>,
    annotations: Vec<CocoAnnotation>,
    categories: Vec<CocoCategory>,
}

struct Parser<'a> {
    /// The cursor over the file's bytes.
    lx: Lexer<'a>,
    lim: &'a CocoLimits,
    /// Estimated bytes of the parsed structure so far.
    mem: u64,
    /// Scratch lists, reused across annotations: a list is read into one, then copied into an allocation of
    /// exactly its length (no growth reallocations, no capacity slack kept in the result).
    scratch: Scratch,
}

#[derive(Default)]
struct Scratch {
    coords: Vec<f64>,
    polys: Vec<Vec<f64>>,
    runs: Vec<u32>,
    keypoints: Vec<f32>,
}

/// Append `x` to a list that may grow large, reporting an allocation failure instead of aborting.
fn push_checked<T>(v: &mut Vec<T>, x: T, at: usize, what: &str) -> PResult<()> {
    if v.len() == v.capacity() && v.try_reserve(1).is_err() {
        let bytes = (v.len() as u64 + 1).saturating_mul(std::mem::size_of::<T>() as u64);
        return Err(Fail { kind: FailKind::Memory(bytes), at, what: what.to_string(), ctx: String::new() });
    }
    v.push(x);
    Ok(())
}

impl<'a> Parser<'a> {
    // -- the lexer (json/), with its syntax errors as this parser's failures -----------------------------------

    #[inline]
    fn ws(&mut self) {
        self.lx.ws();
    }

    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.lx.peek()
    }

    #[inline]
    fn peek_at(&mut self) -> usize {
        self.lx.peek_at()
    }

    fn found(&self, at: usize) -> String {
        self.lx.found(at)
    }

    fn type_error(&self, at: usize, what: &str, expected: &str) -> Fail {
        schema(at, format!("{what} must be {expected}, found {}", self.found(at)))
    }

    fn literal(&mut self, lit: &[u8]) -> PResult<()> {
        Ok(self.lx.literal(lit)?)
    }

    fn string_span(&mut self) -> PResult<(usize, usize, bool)> {
        Ok(self.lx.string_span()?)
    }

    /// The contents of a string span, unescaped, at most `limit` bytes. A lone surrogate escape cannot be UTF-8:
    /// refused.
    fn unescape(&self, a: usize, b: usize, esc: bool, limit: usize, what: &str) -> PResult<Vec<u8>> {
        self.lx.unescape(a, b, esc, limit, Surrogates::Refuse).map_err(|e| match e {
            UnescapeError::TooLong => schema(a, format!("{what} is longer than the limit of {limit} bytes")),
            UnescapeError::LoneSurrogate(u) => {
                schema(a, format!("{what} has a lone surrogate escape \\u{u:04x}, which is not UTF-8"))
            }
        })
    }

    #[inline]
    fn next_elem(&mut self, first: &mut bool) -> PResult<bool> {
        Ok(self.lx.next_elem(first)?)
    }

    /// After an object's `{`: the next key's kind (the cursor is then at its value), or `None` when the object
    /// ended.
    #[inline]
    fn next_key(&mut self, first: &mut bool) -> PResult<Option<Key>> {
        let Some((a, b, esc)) = self.lx.next_key(first)? else { return Ok(None) };
        Ok(Some(if !esc {
            classify_plain(&self.lx.s[a..b])
        } else if b - a <= 96 {
            self.unescape(a, b, true, 96, "key").map_or(Key::Other, |k| classify_plain(&k))
        } else {
            Key::Other
        }))
    }

    fn skip_value(&mut self, depth: usize) -> PResult<()> {
        Ok(self.lx.skip_value(depth)?)
    }

    #[inline]
    fn number(&mut self) -> PResult<Num> {
        Ok(self.lx.number()?)
    }

    // -- typed values ---------------------------------------------------------------------------------------

    /// A finite number (`what` names it in errors).
    #[inline]
    fn finite(&mut self, what: &str) -> PResult<f64> {
        self.ws();
        let at = self.lx.i;
        if let Some((v, j)) = simple_number(self.lx.s, at) {
            self.lx.i = j;
            return Ok(v);
        }
        match self.lx.s.get(at) {
            Some(b'-' | b'0'..=b'9') => {
                let n = self.number()?;
                if n.f.is_finite() {
                    Ok(n.f)
                } else {
                    Err(schema(at, format!("{what} must be a finite number, found {}", self.found(at))))
                }
            }
            _ => Err(self.type_error(at, what, "a finite number")),
        }
    }

    /// An integer that fits `i64`; a float with an integral value counts (`7.0` is Python's `7` as a dict key).
    fn int_value(&mut self, what: &str) -> PResult<i64> {
        self.ws();
        let at = self.lx.i;
        match self.lx.s.get(at) {
            Some(b'-' | b'0'..=b'9') => {
                let n = self.number()?;
                if let Some(v) = n.int {
                    return Ok(v);
                }
                // ±2^63 are exactly representable; every integral float in [-2^63, 2^63) fits i64.
                if n.f.is_finite() && n.f.fract() == 0.0 && n.f >= i64::MIN as f64 && n.f < -(i64::MIN as f64) {
                    return Ok(n.f as i64);
                }
                Err(schema(at, format!("{what} must be an integer that fits 64 bits, found {}", self.found(at))))
            }
            _ => Err(self.type_error(at, what, "an integer")),
        }
    }

    /// An integer in `0..=u32::MAX`.
    fn u32_value(&mut self, what: &str) -> PResult<u32> {
        let at = self.peek_at();
        let v = self.int_value(what)?;
        u32::try_from(v).map_err(|_| schema(at, format!("{what} must be in 0..=4294967295, found {v}")))
    }

    /// An image side: an integer in `1..=u32::MAX`.
    fn side(&mut self, what: &str) -> PResult<u32> {
        self.ws();
        let at = self.lx.i;
        let v = self.int_value(what)?;
        match u32::try_from(v) {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(schema(at, format!("{what} must be a positive integer (pixels), found {v}"))),
        }
    }

    /// A string kept in the structure: at most `max_string_bytes`, valid UTF-8.
    fn string_value(&mut self, what: &str) -> PResult<String> {
        self.ws();
        let at = self.lx.i;
        if self.lx.s.get(at) != Some(&b'"') {
            return Err(self.type_error(at, what, "a string"));
        }
        let (a, b, esc) = self.string_span()?;
        let bytes = self.unescape(a, b, esc, self.lim.max_string_bytes, what)?;
        String::from_utf8(bytes).map_err(|_| schema(at, format!("{what} is not UTF-8")))
    }

    /// Whether the cursor is at `null` (consumed if so).
    fn null(&mut self) -> PResult<bool> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    /// A list at the cursor: its `[` consumed, or a type error.
    fn open_list(&mut self, what: &str, expected: &str) -> PResult<usize> {
        self.ws();
        let at = self.lx.i;
        if self.lx.s.get(at) != Some(&b'[') {
            return Err(self.type_error(at, what, expected));
        }
        self.lx.i += 1;
        Ok(at)
    }

    fn limit(at: usize, what: &str, limit: usize, name: &str) -> Fail {
        schema(at, format!("{what} has more than {limit} entries, the limit (CocoLimits::{name})"))
    }

    /// Account for `bytes` more of parsed structure; refuse past `max_memory_bytes`.
    fn spend(&mut self, bytes: u64, at: usize) -> PResult<()> {
        self.mem = self.mem.saturating_add(bytes);
        if self.mem > self.lim.max_memory_bytes {
            return Err(schema(
                at,
                format!(
                    "the parsed annotations would take more than {} bytes, the limit (CocoLimits::max_memory_bytes)",
                    self.lim.max_memory_bytes
                ),
            ));
        }
        Ok(())
    }

    // -- schema ---------------------------------------------------------------------------------------------

    fn file(&mut self, raw: &mut Raw) -> PResult<()> {
        if self.lx.s.starts_with(&[0xEF, 0xBB, 0xBF]) {
            return Err(syntax(
                0,
                "the file starts with a UTF-8 byte order mark, which JSON (and Python's json) refuses",
            ));
        }
        json::check_utf8(self.lx.s)?;
        let at = self.peek_at();
        match self.lx.s.get(at) {
            None => return Err(syntax(at, "the file is empty (no JSON value)")),
            Some(b'{') => self.lx.i += 1,
            Some(b'[') => {
                return Err(schema(
                    at,
                    "the top level is a list, not an object: a COCO annotation file is {\"images\": [...], \
                     \"annotations\": [...], \"categories\": [...]} (a top-level list is a results file)",
                ));
            }
            Some(b'"' | b't' | b'f' | b'n' | b'N' | b'I' | b'-' | b'0'..=b'9') => {
                return Err(self.type_error(
                    at,
                    "the top level",
                    "an object {\"images\": [...], \"annotations\": [...], ...}",
                ));
            }
            Some(_) => return Err(syntax(at, format!("not JSON: expected '{{', found {}", self.found(at)))),
        }
        let mut first = true;
        while let Some(key) = self.next_key(&mut first)? {
            match key {
                Key::Images => self.images(&mut raw.images)?,
                Key::Annotations => self.annotations(&mut raw.annotations)?,
                Key::Categories => self.categories(&mut raw.categories)?,
                _ => self.skip_value(1)?,
            }
        }
        self.ws();
        if self.lx.i != self.lx.s.len() {
            return Err(syntax(self.lx.i, format!("extra data after the top-level object: {}", self.found(self.lx.i))));
        }
        Ok(())
    }

    /// The object at the cursor as element `index` of a list of `kind`s: `field` is called for each key with the
    /// cursor at its value, which it must consume. A schema error in a value is remembered, the value skipped, and
    /// the rest of the object read only for its `id`, so that the error names it; syntax errors end the parse.
    /// Returns the span of the `id` value, if any.
    fn element(
        &mut self,
        kind: &str,
        index: usize,
        mut field: impl FnMut(&mut Self, Key) -> PResult<()>,
    ) -> PResult<Option<(usize, usize)>> {
        let s = self.lx.s;
        let ctx = |id: Option<(usize, usize)>| match id {
            Some((a, b)) => format!("{kind} {index} (id {})", snippet(s, a, b)),
            None => format!("{kind} {index}"),
        };
        let at = self.peek_at();
        if s.get(at) != Some(&b'{') {
            let mut e = self.type_error(at, kind, "an object");
            e.ctx = ctx(None);
            return Err(e);
        }
        self.lx.i += 1;
        let mut first = true;
        let mut id = None;
        let mut pending: Option<Fail> = None;
        loop {
            let key = match self.next_key(&mut first) {
                Ok(Some(k)) => k,
                Ok(None) => break,
                Err(mut e) => {
                    e.ctx = ctx(id);
                    return Err(e);
                }
            };
            let start = self.lx.i;
            let r = if pending.is_none() { field(self, key) } else { self.skip_value(3) };
            if let Err(e) = r {
                if e.kind != FailKind::Schema || pending.is_some() {
                    let mut e = e;
                    e.ctx = ctx(id);
                    return Err(e);
                }
                pending = Some(e);
                self.lx.i = start;
                if let Err(mut e) = self.skip_value(3) {
                    e.ctx = ctx(id);
                    return Err(e);
                }
            }
            if key == Key::Id {
                id = Some((start, self.lx.i));
            }
        }
        if let Some(mut e) = pending {
            e.ctx = ctx(id);
            return Err(e);
        }
        Ok(id)
    }

    /// A required field missing from element `index`.
    fn missing(&self, at: usize, kind: &str, index: usize, id: Option<(usize, usize)>, key: &str) -> Fail {
        let mut e = schema(at, format!("has no \"{key}\""));
        e.ctx = match id {
            Some((a, b)) => format!("{kind} {index} (id {})", snippet(self.lx.s, a, b)),
            None => format!("{kind} {index} (no id)"),
        };
        e
    }

    fn images(&mut self, out: &mut Vec<CocoImage>) -> PResult<()> {
        self.open_list("images", "a list of image objects")?;
        out.clear(); // a repeated key: the last value wins, as in Python's json
        let mut first = true;
        while self.next_elem(&mut first)? {
            let at = self.lx.i;
            if out.len() == self.lim.max_images {
                return Err(Self::limit(at, "images", self.lim.max_images, "max_images"));
            }
            let im = self.image(out.len())?;
            self.spend((std::mem::size_of::<CocoImage>() + im.file_name.len()) as u64, at)?;
            push_checked(out, im, at, "the images")?;
        }
        Ok(())
    }

    fn image(&mut self, index: usize) -> PResult<CocoImage> {
        let at = self.peek_at();
        let (mut id, mut file_name, mut width, mut height) = (None, None, None, None);
        let id_span = self.element("image", index, |p, key| {
            match key {
                Key::Id => id = Some(p.int_value("id")?),
                Key::FileName => file_name = Some(p.string_value("file_name")?),
                Key::Width => width = Some(p.side("width")?),
                Key::Height => height = Some(p.side("height")?),
                _ => p.skip_value(3)?,
            }
            Ok(())
        })?;
        let miss = |key| self.missing(at, "image", index, id_span, key);
        Ok(CocoImage {
            id: id.ok_or_else(|| miss("id"))?,
            file_name: file_name.ok_or_else(|| miss("file_name"))?,
            width: width.ok_or_else(|| miss("width"))?,
            height: height.ok_or_else(|| miss("height"))?,
        })
    }

    fn annotations(&mut self, out: &mut Vec<CocoAnnotation>) -> PResult<()> {
        self.open_list("annotations", "a list of annotation objects")?;
        out.clear();
        let max = self.lim.max_annotations.min(u32::MAX as usize - 1);
        let mut first = true;
        while self.next_elem(&mut first)? {
            let at = self.lx.i;
            if out.len() == max {
                return Err(Self::limit(at, "annotations", max, "max_annotations"));
            }
            let a = self.annotation(out.len())?;
            self.spend(annotation_bytes(&a), at)?;
            push_checked(out, a, at, "the annotations")?;
        }
        Ok(())
    }

    fn annotation(&mut self, index: usize) -> PResult<CocoAnnotation> {
        let at = self.peek_at();
        let (mut id, mut image_id, mut category_id, mut bbox, mut area) = (None, None, None, None, None);
        let (mut iscrowd, mut segmentation, mut keypoints, mut num_keypoints) = (false, None, None, None);
        let id_span = self.element("annotation", index, |p, key| {
            match key {
                Key::Id => id = Some(p.int_value("id")?),
                Key::ImageId => image_id = Some(p.int_value("image_id")?),
                Key::CategoryId => category_id = Some(p.int_value("category_id")?),
                Key::Bbox => bbox = Some(p.bbox()?),
                Key::Area => area = Some(p.finite("area")?),
                Key::Iscrowd => iscrowd = p.crowd()?,
                Key::Segmentation => segmentation = p.segmentation()?,
                Key::Keypoints => keypoints = p.keypoints()?,
                Key::NumKeypoints => num_keypoints = Some(p.u32_value("num_keypoints")?),
                _ => p.skip_value(3)?,
            }
            Ok(())
        })?;
        let miss = |key| self.missing(at, "annotation", index, id_span, key);
        let bbox: [f64; 4] = bbox.ok_or_else(|| miss("bbox"))?;
        let num_keypoints = num_keypoints.unwrap_or_else(|| {
            keypoints.as_ref().map_or(0, |k: &Vec<f32>| k.chunks_exact(3).filter(|t| t[2] > 0.0).count() as u32)
        });
        Ok(CocoAnnotation {
            id: id.ok_or_else(|| miss("id"))?,
            image_id: image_id.ok_or_else(|| miss("image_id"))?,
            category_id: category_id.ok_or_else(|| miss("category_id"))?,
            bbox,
            area: area.unwrap_or(bbox[2] * bbox[3]),
            iscrowd,
            segmentation,
            keypoints,
            num_keypoints,
        })
    }

    fn bbox(&mut self) -> PResult<[f64; 4]> {
        let at = self.open_list("bbox", "a list of 4 numbers [x, y, width, height]")?;
        let mut b = [0.0; 4];
        let mut n = 0;
        let mut first = true;
        while self.next_elem(&mut first)? {
            if n == 4 {
                return Err(schema(at, "bbox has more than 4 numbers; a COCO box is [x, y, width, height]"));
            }
            b[n] = self.finite("a bbox value")?;
            n += 1;
        }
        if n != 4 {
            return Err(schema(at, format!("bbox has {n} numbers; a COCO box is [x, y, width, height]")));
        }
        let [x, y, w, h] = b;
        if w < 0.0 || h < 0.0 {
            return Err(schema(
                at,
                format!(
                    "bbox [{x:?}, {y:?}, {w:?}, {h:?}] has a negative width or height: a COCO box is [x, y, width, \
                     height] with width, height >= 0 (an [x1, y1, x2, y2] box written as one?)"
                ),
            ));
        }
        // The box reaches the model as float32 XYXY: its corners must be finite there (x + width may overflow
        // float64 too).
        for (what, v) in [("x", x), ("y", y), ("x + width", x + w), ("y + height", y + h)] {
            if !(v as f32).is_finite() {
                return Err(schema(
                    at,
                    format!(
                        "bbox [{x:?}, {y:?}, {w:?}, {h:?}]: {what} = {v:?} is beyond float32's range (±3.4e38): the \
                         box would reach the model as inf"
                    ),
                ));
            }
        }
        Ok(b)
    }

    fn crowd(&mut self) -> PResult<bool> {
        let at = self.peek_at();
        match self.lx.s.get(at) {
            Some(b't') => self.literal(b"true").map(|()| true),
            Some(b'f') => self.literal(b"false").map(|()| false),
            Some(b'-' | b'0'..=b'9') => match self.int_value("iscrowd") {
                Ok(0) => Ok(false),
                Ok(1) => Ok(true),
                Ok(v) => Err(schema(at, format!("iscrowd must be 0 or 1, found {v}"))),
                Err(e) => Err(e),
            },
            _ => Err(self.type_error(at, "iscrowd", "0 or 1")),
        }
    }

    fn segmentation(&mut self) -> PResult<Option<Segmentation>> {
        let at = self.peek_at();
        match self.lx.s.get(at) {
            Some(b'n') => self.literal(b"null").map(|()| None),
            Some(b'[') => self.polygons().map(Some),
            Some(b'{') => self.rle().map(Some),
            _ => Err(self.type_error(
                at,
                "segmentation",
                "a list of polygons [[x0, y0, x1, y1, ...], ...] or an RLE object {\"size\": [h, w], \"counts\": ...}",
            )),
        }
    }

    fn polygons(&mut self) -> PResult<Segmentation> {
        let (max_polys, max_coords) = (self.lim.max_polygons, self.lim.max_polygon_coords);
        self.lx.i += 1; // '['
        let mut polys = std::mem::take(&mut self.scratch.polys);
        let mut coords = std::mem::take(&mut self.scratch.coords);
        polys.clear();
        let r = self.polygons_into(&mut polys, &mut coords, max_polys, max_coords);
        let out = r.map(|()| {
            let mut exact = Vec::with_capacity(polys.len());
            exact.append(&mut polys); // the scratch keeps its capacity
            Segmentation::Polygons(exact)
        });
        self.scratch.polys = polys;
        self.scratch.coords = coords;
        out
    }

    fn polygons_into(
        &mut self,
        polys: &mut Vec<Vec<f64>>,
        coords: &mut Vec<f64>,
        max_polys: usize,
        max_coords: usize,
    ) -> PResult<()> {
        let mut total = 0usize;
        let mut first = true;
        while self.next_elem(&mut first)? {
            let at = self.lx.i;
            if polys.len() == max_polys {
                return Err(Self::limit(at, "segmentation", max_polys, "max_polygons"));
            }
            if self.lx.s.get(at) != Some(&b'[') {
                let hint = if matches!(self.lx.s.get(at), Some(b'-' | b'0'..=b'9')) {
                    " (a flat [x0, y0, ...] list? COCO nests each polygon: [[x0, y0, ...], ...])"
                } else {
                    ""
                };
                return Err(schema(
                    at,
                    format!("polygon {} must be a list of numbers, found {}{hint}", polys.len(), self.found(at)),
                ));
            }
            self.lx.i += 1;
            coords.clear();
            let mut first_c = true;
            while self.next_elem(&mut first_c)? {
                if total == max_coords {
                    return Err(schema(
                        self.lx.i,
                        format!(
                            "segmentation has more than {max_coords} polygon coordinates, the limit \
                             (CocoLimits::max_polygon_coords)"
                        ),
                    ));
                }
                coords.push(self.finite("a polygon coordinate")?);
                total += 1;
            }
            polys.push(coords.as_slice().to_vec());
        }
        Ok(())
    }

    fn rle(&mut self) -> PResult<Segmentation> {
        let at = self.lx.i;
        self.lx.i += 1; // '{'
        let mut size = None;
        let mut counts = None;
        let mut first = true;
        while let Some(key) = self.next_key(&mut first)? {
            match key {
                Key::Size => size = Some(self.rle_size()?),
                Key::Counts => counts = Some(self.rle_counts()?),
                _ => self.skip_value(4)?,
            }
        }
        let (Some(size), Some(counts)) = (size, counts) else {
            return Err(schema(at, "an RLE segmentation needs both \"size\": [h, w] and \"counts\""));
        };
        Ok(match counts {
            RleCounts::Runs(counts) => Segmentation::Counts { size, counts },
            RleCounts::Compressed(counts) => Segmentation::Compressed { size, counts },
        })
    }

    fn rle_size(&mut self) -> PResult<[u32; 2]> {
        let at = self.open_list("RLE size", "a list [height, width]")?;
        let mut hw = [0u32; 2];
        let mut n = 0;
        let mut first = true;
        while self.next_elem(&mut first)? {
            if n == 2 {
                return Err(schema(at, "RLE size has more than 2 numbers; it is [height, width]"));
            }
            hw[n] = self.u32_value("an RLE size")?;
            n += 1;
        }
        if n != 2 {
            return Err(schema(at, format!("RLE size has {n} numbers; it is [height, width]")));
        }
        Ok(hw)
    }

    fn rle_counts(&mut self) -> PResult<RleCounts> {
        let max = self.lim.max_rle_counts;
        let at = self.peek_at();
        match self.lx.s.get(at) {
            Some(b'[') => {
                self.lx.i += 1;
                let mut runs = std::mem::take(&mut self.scratch.runs);
                runs.clear();
                let r = self.runs_into(&mut runs, max);
                let out = r.map(|()| RleCounts::Runs(runs.as_slice().to_vec()));
                self.scratch.runs = runs;
                out
            }
            Some(b'"') => {
                let (a, b, esc) = self.string_span()?;
                let bytes = self.unescape(a, b, esc, max, "the compressed RLE counts (CocoLimits::max_rle_counts)")?;
                Ok(RleCounts::Compressed(bytes))
            }
            _ => Err(self.type_error(at, "RLE counts", "a list of run lengths or a compressed RLE string")),
        }
    }

    fn runs_into(&mut self, runs: &mut Vec<u32>, max: usize) -> PResult<()> {
        let mut first = true;
        while self.next_elem(&mut first)? {
            if runs.len() == max {
                return Err(Self::limit(self.lx.i, "RLE counts", max, "max_rle_counts"));
            }
            runs.push(self.u32_value("an RLE count")?);
        }
        Ok(())
    }

    fn keypoints(&mut self) -> PResult<Option<Vec<f32>>> {
        if self.null()? {
            return Ok(None);
        }
        let at = self.open_list("keypoints", "a list of numbers [x1, y1, v1, ...]")?;
        let mut v = std::mem::take(&mut self.scratch.keypoints);
        v.clear();
        let r = self.keypoints_into(&mut v, at);
        let out = r.map(|()| Some(v.as_slice().to_vec()));
        self.scratch.keypoints = v;
        out
    }

    fn keypoints_into(&mut self, v: &mut Vec<f32>, at: usize) -> PResult<()> {
        let max = self.lim.max_keypoint_values;
        let mut first = true;
        while self.next_elem(&mut first)? {
            if v.len() == max {
                return Err(Self::limit(self.lx.i, "keypoints", max, "max_keypoint_values"));
            }
            let x_at = self.lx.i;
            let x = self.finite("a keypoint value")?;
            let y = x as f32; // as torch.tensor(..., dtype=float32) converts Python's float
            if !y.is_finite() {
                return Err(schema(x_at, format!("keypoint value {x:?} does not fit a 32-bit float")));
            }
            if v.len() % 3 == 2 && !(y == 0.0 || y == 1.0 || y == 2.0) {
                return Err(schema(
                    x_at,
                    format!(
                        "keypoint {}'s visibility is {x:?}: COCO's are 0 (not labeled), 1 (labeled, not visible) \
                         and 2 (labeled, visible)",
                        v.len() / 3
                    ),
                ));
            }
            v.push(y);
        }
        if !v.len().is_multiple_of(3) {
            return Err(schema(
                at,
                format!("keypoints has {} numbers, not a multiple of 3 (x, y, visibility triples)", v.len()),
            ));
        }
        Ok(())
    }

    fn categories(&mut self, out: &mut Vec<CocoCategory>) -> PResult<()> {
        self.open_list("categories", "a list of category objects")?;
        out.clear();
        let mut first = true;
        while self.next_elem(&mut first)? {
            let at = self.lx.i;
            if out.len() == self.lim.max_categories {
                return Err(Self::limit(at, "categories", self.lim.max_categories, "max_categories"));
            }
            let c = self.category(out.len())?;
            let strings: usize =
                c.name.len() + c.supercategory.len() + c.keypoints.iter().map(String::len).sum::<usize>();
            let bytes = std::mem::size_of::<CocoCategory>()
                + strings
                + c.keypoints.len() * std::mem::size_of::<String>()
                + c.skeleton.len() * 8;
            self.spend(bytes as u64, at)?;
            push_checked(out, c, at, "the categories")?;
        }
        Ok(())
    }

    fn category(&mut self, index: usize) -> PResult<CocoCategory> {
        let at = self.peek_at();
        let mut c = CocoCategory::default();
        let mut id = None;
        let id_span = self.element("category", index, |p, key| {
            match key {
                Key::Id => id = Some(p.int_value("id")?),
                Key::Name => c.name = p.string_value("name")?,
                Key::Supercategory => c.supercategory = p.string_value("supercategory")?,
                Key::Keypoints => c.keypoints = p.names()?,
                Key::Skeleton => c.skeleton = p.skeleton()?,
                _ => p.skip_value(3)?,
            }
            Ok(())
        })?;
        c.id = id.ok_or_else(|| self.missing(at, "category", index, id_span, "id"))?;
        Ok(c)
    }

    /// A category's keypoint names (`null`: none).
    fn names(&mut self) -> PResult<Vec<String>> {
        if self.null()? {
            return Ok(Vec::new());
        }
        self.open_list("keypoints", "a list of keypoint names")?;
        let max = self.lim.max_category_list;
        let mut v = Vec::new();
        let mut first = true;
        while self.next_elem(&mut first)? {
            if v.len() == max {
                return Err(Self::limit(self.lx.i, "keypoints", max, "max_category_list"));
            }
            v.push(self.string_value("a keypoint name")?);
        }
        Ok(v)
    }

    /// A category's skeleton: `[[a, b], ...]` (`null`: none).
    fn skeleton(&mut self) -> PResult<Vec<[u32; 2]>> {
        if self.null()? {
            return Ok(Vec::new());
        }
        self.open_list("skeleton", "a list of [a, b] keypoint pairs")?;
        let max = self.lim.max_category_list;
        let mut v = Vec::new();
        let mut first = true;
        while self.next_elem(&mut first)? {
            if v.len() == max {
                return Err(Self::limit(self.lx.i, "skeleton", max, "max_category_list"));
            }
            let at = self.open_list("a skeleton edge", "a pair [a, b] of keypoint numbers")?;
            let mut e = [0u32; 2];
            let mut n = 0;
            let mut first_e = true;
            while self.next_elem(&mut first_e)? {
                if n == 2 {
                    return Err(schema(at, "a skeleton edge has more than 2 numbers"));
                }
                e[n] = self.u32_value("a skeleton keypoint number")?;
                n += 1;
            }
            if n != 2 {
                return Err(schema(at, format!("a skeleton edge has {n} numbers, not 2")));
            }
            v.push(e);
        }
        Ok(v)
    }
}

enum RleCounts {
    Runs(Vec<u32>),
    Compressed(Vec<u8>),
}

/// Estimated heap + inline bytes of one parsed annotation.
fn annotation_bytes(a: &CocoAnnotation) -> u64 {
    let seg = match &a.segmentation {
        None => 0,
        Some(Segmentation::Polygons(p)) => p.iter().map(|q| 24 + 8 * q.len()).sum(),
        Some(Segmentation::Counts { counts, .. }) => 4 * counts.len(),
        Some(Segmentation::Compressed { counts, .. }) => counts.len(),
    };
    let kp = a.keypoints.as_ref().map_or(0, |k| 4 * k.len());
    (std::mem::size_of::<CocoAnnotation>() + seg + kp) as u64
}

// ---------------------------------------------------------------------------------------------------------------
// From the lists as written to the checked structure

/// An RLE segmentation's own `size` must be its image's `[height, width]`: pycocotools decodes it at its own
/// size, so another one would be a mask placed at the image's top-left corner, or cut.
fn check_rle_size(a: &CocoAnnotation, image: &CocoImage) -> PResult<()> {
    let size = match &a.segmentation {
        Some(Segmentation::Counts { size, .. } | Segmentation::Compressed { size, .. }) => *size,
        _ => return Ok(()),
    };
    if size == [image.height, image.width] {
        return Ok(());
    }
    Err(schema(
        NO_POS,
        format!(
            "its RLE segmentation's size is [{}, {}] (height, width), but its image {} ({:?}) is [{}, {}]: the mask \
             would be misplaced or cut",
            size[0], size[1], image.id, image.file_name, image.height, image.width
        ),
    ))
}

fn finish(raw: Raw) -> PResult<CocoFile> {
    let Raw { images: mut raw_images, annotations: mut anns, categories } = raw;
    let mem = |what: &str, n: usize, each: usize| Fail {
        kind: FailKind::Memory((n as u64).saturating_mul(each as u64)),
        at: NO_POS,
        what: what.to_string(),
        ctx: String::new(),
    };

    // Images: sorted by id (stable: among equal ids the first in the file first); an exact duplicate is one image.
    let mut order: Vec<u32> = Vec::new();
    order.try_reserve_exact(raw_images.len()).map_err(|_| mem("the image order", raw_images.len(), 4))?;
    order.extend(0..raw_images.len() as u32);
    order.sort_by_key(|&k| raw_images[k as usize].id);
    let mut images: Vec<CocoImage> = Vec::new();
    images.try_reserve_exact(raw_images.len()).map_err(|_| mem("the images", raw_images.len(), 48))?;
    let mut prev: Option<usize> = None;
    for &k in &order {
        let k = k as usize;
        if let (Some(p), Some(last)) = (prev, images.last())
            && last.id == raw_images[k].id
        {
            if *last != raw_images[k] {
                let (a, b) = (last, &raw_images[k]);
                return Err(schema(
                    NO_POS,
                    format!(
                        "images {p} and {k} share id {} but differ ({:?} {}x{} and {:?} {}x{}); pycocotools would \
                         keep only the last",
                        a.id, a.file_name, a.width, a.height, b.file_name, b.width, b.height
                    ),
                ));
            }
            continue;
        }
        prev = Some(k);
        images.push(std::mem::take(&mut raw_images[k]));
    }
    drop(raw_images);
    drop(order);

    // Annotation ids: equal ids must be exact duplicates (loadAnns fetches by id: the last one would stand for all).
    let mut ids: Vec<(i64, u32)> = Vec::new();
    ids.try_reserve_exact(anns.len()).map_err(|_| mem("the annotation ids", anns.len(), 16))?;
    ids.extend(anns.iter().enumerate().map(|(k, a)| (a.id, k as u32)));
    ids.sort_unstable();
    for w in ids.windows(2) {
        let (a, b) = (w[0].1 as usize, w[1].1 as usize);
        if w[0].0 == w[1].0 && anns[a] != anns[b] {
            return Err(schema(
                NO_POS,
                format!(
                    "annotations {a} and {b} share id {} but differ (image_id {} and {}); pycocotools' loadAnns would \
                     return the last one for both",
                    w[0].0, anns[a].image_id, anns[b].image_id
                ),
            ));
        }
    }
    drop(ids);

    // Group by image (counting sort: stable, so file order within an image), orphans last and then dropped.
    let n = images.len();
    let mut dest: Vec<u32> = Vec::new();
    dest.try_reserve_exact(anns.len()).map_err(|_| mem("the annotation order", anns.len(), 4))?;
    let mut offsets: Vec<u32> = Vec::new();
    offsets.try_reserve_exact(n + 1).map_err(|_| mem("the per-image ranges", n + 1, 4))?;
    offsets.resize(n + 1, 0);
    const ORPHAN: u32 = u32::MAX;
    for (index, a) in anns.iter().enumerate() {
        match images.binary_search_by_key(&a.image_id, |im| im.id) {
            Ok(k) => {
                check_rle_size(a, &images[k]).map_err(|mut e| {
                    e.ctx = format!("annotation {index} (id {})", a.id);
                    e
                })?;
                offsets[k + 1] += 1;
                dest.push(k as u32);
            }
            Err(_) => dest.push(ORPHAN),
        }
    }
    for k in 0..n {
        offsets[k + 1] += offsets[k];
    }
    let kept = offsets[n];
    let mut next: Vec<u32> = offsets[..n].to_vec();
    let mut orphan_next = kept;
    for d in dest.iter_mut() {
        if *d == ORPHAN {
            *d = orphan_next;
            orphan_next += 1;
        } else {
            let k = *d as usize;
            *d = next[k];
            next[k] += 1;
        }
    }
    drop(next);
    // Apply the permutation in place (each swap puts one annotation at its final place).
    for i in 0..anns.len() {
        while dest[i] as usize != i {
            let d = dest[i] as usize;
            anns.swap(i, d);
            dest.swap(i, d);
        }
    }
    let orphans = (anns.len() - kept as usize) as u64;
    anns.truncate(kept as usize);

    // Categories: file order; equal ids must be exact duplicates (loadCats fetches by id).
    let mut cids: Vec<(i64, u32)> = categories.iter().enumerate().map(|(k, c)| (c.id, k as u32)).collect();
    cids.sort_unstable();
    for w in cids.windows(2) {
        let (a, b) = (w[0].1 as usize, w[1].1 as usize);
        if w[0].0 == w[1].0 && categories[a] != categories[b] {
            return Err(schema(
                NO_POS,
                format!(
                    "categories {a} and {b} share id {} but differ ({:?} and {:?}); pycocotools' loadCats would return \
                     the last one for both",
                    w[0].0, categories[a].name, categories[b].name
                ),
            ));
        }
    }

    Ok(CocoFile { images, annotations: anns, offsets, categories, orphans })
}

#[cfg(test)]
#[path = "coco_tests.rs"]
mod tests;
