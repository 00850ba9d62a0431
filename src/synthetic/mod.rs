//! synthetic — tooling beside the data path, not on it: the deterministic, photo-like dataset that
//! `trdata bench` and the tests fall back to when no data is given, painted here and written as JPEGs by the
//! libjpeg-turbo encoder in [`encode`]. No pipeline stage (source … export) depends on this module; it writes
//! datasets that the pipeline then reads like any other ImageFolder. Its users are the tooling binding
//! (`py/bench.rs`), the tests and the fuzz seeds.
//!
//! ```text
//! (seed, index) ─► SyntheticImagePlan ─► paint (RGB, photo-like) ─► JpegEncoder ─► root/class_NN/NNNNNN.jpg
//! ```
//!
//! Why the content is painted and not flat: decode cost is dominated by Huffman decoding, i.e. by the number
//! of entropy-coded bits, so flat-colour JPEGs decode several times faster than photos and would make every
//! throughput number a lie. The painter layers smooth gradients (sky over ground), cloud-like lighting,
//! fractal texture, soft-edged shaded shapes (some striped or grainy) and sensor grain, with a per-image
//! "busyness" spreading file sizes the way photos spread. Measured on the default 1,000 images: 0.49
//! bytes/pixel, ~205 k pixels per image on average (ImageNet sample: 0.54 B/px, ~202 k px) and a full-decode
//! cost per pixel within ~15 % of the ImageNet sample's. Sizes follow ImageNet's spread (500×375 and 500×333
//! dominate, a quarter portrait, a few 900–1400 px and 120–300 px ones); quality 85–95 (mostly 90); 85 %
//! 4:2:0 chroma, 12 % 4:4:4, 3 % grayscale.
//!
//! **Determinism.** Every decision (size, quality, subsampling, class, each pixel) comes from a SplitMix64
//! stream keyed by (seed, image index, purpose), never from the thread that does the work, so the files are
//! identical for any thread count. (Painting uses `f32` `exp`/`sin`/`sqrt`, so another platform's libm may
//! change a few pixels: the marker, not the bytes, identifies a dataset.)
//!
//! **Atomic publication.** A dataset is written into a sibling temp folder `.NAME.tmp-PID-NANOS`, the marker
//! file (`.trdata-synthetic`, holding version, count, seed) is written last, and the folder is renamed onto
//! `root` in one `rename(2)`. An interrupted generation therefore never looks complete; a later call
//! removes temp folders whose process is gone. Two processes racing: the loser sees the winner's complete
//! folder, checks its marker and discards its own copy.

pub mod encode;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::decode::Subsampling;
use encode::JpegEncoder;

// ---------------------------------------------------------------------------------------------------------
// Deterministic randomness (local on purpose: the dataset must not change when the augmentation RNG does)
// ---------------------------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, good enough for painting, trivially seekable by key.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn keyed(seed: u64, index: u64, purpose: u64) -> Self {
        let mut s = Self(seed ^ 0x5452_4441_5441_0001); // "TRDATA\0\1"
        s.0 = s.0.wrapping_add(mix64(index.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        s.0 = s.0.wrapping_add(mix64(purpose.wrapping_add(0xD1B5_4A32_D192_ED03)));
        s
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
    fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform integer in lo..=hi.
    fn int(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next_u64() % u64::from(hi - lo + 1)) as u32
    }
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Cheap 32-bit integer hash of a lattice point (for value noise and per-pixel grain).
#[inline]
fn hash3(x: i32, y: i32, k: u32) -> u32 {
    let mut h =
        (x as u32).wrapping_mul(0x8DA6_B343) ^ (y as u32).wrapping_mul(0xD816_3841) ^ k.wrapping_mul(0xCB1A_B31F);
    h ^= h >> 15;
    h = h.wrapping_mul(0x2C1B_3C6D);
    h ^= h >> 12;
    h = h.wrapping_mul(0x297A_2D39);
    h ^ (h >> 15)
}

/// Hash → [-1, 1).
#[inline]
fn hash_signed(x: i32, y: i32, k: u32) -> f32 {
    (hash3(x, y, k) >> 8) as f32 * (2.0 / (1u32 << 24) as f32) - 1.0
}

/// Smooth value noise in [-1, 1] at (x, y) in lattice units.
#[inline]
fn value_noise(x: f32, y: f32, k: u32) -> f32 {
    let (xf, yf) = (x.floor(), y.floor());
    let (xi, yi) = (xf as i32, yf as i32);
    let (tx, ty) = (x - xf, y - yf);
    let (sx, sy) = (tx * tx * (3.0 - 2.0 * tx), ty * ty * (3.0 - 2.0 * ty));
    let a = hash_signed(xi, yi, k);
    let b = hash_signed(xi + 1, yi, k);
    let c = hash_signed(xi, yi + 1, k);
    let d = hash_signed(xi + 1, yi + 1, k);
    let top = a + (b - a) * sx;
    let bottom = c + (d - c) * sx;
    top + (bottom - top) * sy
}

/// Fractal (fBm) value noise: `octaves` layers, each twice the frequency and `gain` times the amplitude.
#[inline]
fn fbm(x: f32, y: f32, octaves: u32, gain: f32, k: u32) -> f32 {
    let (mut sum, mut amp, mut freq, mut norm) = (0.0, 1.0, 1.0, 0.0);
    for o in 0..octaves {
        sum += amp * value_noise(x * freq, y * freq, k.wrapping_add(o.wrapping_mul(0x9E37)));
        norm += amp;
        amp *= gain;
        freq *= 2.0;
    }
    sum / norm
}

// ---------------------------------------------------------------------------------------------------------
// What each synthetic image is: size, quality, chroma, class
// ---------------------------------------------------------------------------------------------------------

/// Version tag of the synthetic dataset. Bump it whenever the painter, the plan or the layout changes, so
/// cached copies of an older generation are not mistaken for the current one.
pub const SYNTHETIC_VERSION: &str = "synthetic-v1";
/// Marker file written last into a complete synthetic dataset.
pub const SYNTHETIC_MARKER_FILE: &str = ".trdata-synthetic";
/// Number of classes (sub-folders) of the synthetic dataset.
pub const SYNTHETIC_CLASSES: u32 = 10;

/// Everything that is decided about one synthetic image before painting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntheticImagePlan {
    /// Dataset index (0-based); also names the file.
    pub index: u32,
    /// Class (sub-folder number); balanced: `index % SYNTHETIC_CLASSES`.
    pub class: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// JPEG quality (85..=95, mostly 90).
    pub quality: u8,
    /// Chroma subsampling (mostly 4:2:0).
    pub subsampling: Subsampling,
}

impl SyntheticImagePlan {
    /// The plan of image `index` of the dataset generated with `seed`.
    pub fn new(seed: u64, index: u32) -> Self {
        let mut r = SplitMix64::keyed(seed, u64::from(index), 1);
        // Sizes: ImageNet's train set is dominated by 500-px-wide Flickr images; ~25 % are portrait.
        let (long, mut short) = match r.unit() {
            u if u < 0.40 => (500, 375),
            u if u < 0.58 => (500, r.int(332, 335)),
            u if u < 0.62 => (500, 500),
            u if u < 0.85 => {
                let long = r.int(300, 640);
                (long, (long as f32 * r.range(0.56, 0.9)) as u32)
            }
            u if u < 0.91 => *[(640, 480), (800, 600), (600, 450), (400, 300), (1024, 768)]
                .get(r.int(0, 4) as usize)
                .unwrap_or(&(640, 480)),
            u if u < 0.94 => {
                // Large camera-ish images, ~900-1400 px on the long side.
                let long = r.int(900, 1400);
                (long, (long as f32 * r.range(0.62, 0.8)) as u32)
            }
            _ => {
                // Small thumbnails, ~120-300 px.
                let long = r.int(120, 300);
                (long, (long as f32 * r.range(0.6, 0.9)) as u32)
            }
        };
        short = short.clamp(32, long);
        let portrait = r.unit() < 0.26;
        let (width, height) = if portrait { (short, long) } else { (long, short) };
        let quality = match r.unit() {
            u if u < 0.6 => 90,
            u if u < 0.8 => r.int(85, 89) as u8,
            _ => r.int(91, 95) as u8,
        };
        let subsampling = match r.unit() {
            u if u < 0.85 => Subsampling::S420,
            u if u < 0.97 => Subsampling::S444,
            _ => Subsampling::Gray,
        };
        Self { index, class: index % SYNTHETIC_CLASSES, width, height, quality, subsampling }
    }

    /// Path of this image relative to the dataset root: `class_NN/NNNNNN.jpg`.
    pub fn relative_path(&self) -> PathBuf {
        PathBuf::from(format!("class_{:02}", self.class)).join(format!("{:06}.jpg", self.index))
    }
}

// ---------------------------------------------------------------------------------------------------------
// The painter
// ---------------------------------------------------------------------------------------------------------
//
// Cost matters (1,000 images ≈ 200 M pixels are painted on first use), so everything low-frequency is
// evaluated on a coarse grid and interpolated, and all fine detail is looked up in one per-image tile of
// fractal noise instead of being evaluated per pixel.

#[derive(Clone, Copy)]
struct Rgb([f32; 3]);

impl Rgb {
    fn lerp(self, o: Rgb, t: f32) -> Rgb {
        Rgb([0, 1, 2].map(|c| self.0[c] + (o.0[c] - self.0[c]) * t))
    }
}

/// A colour of `hue` (0..1, wraps), saturation `s` and value `v` (0..1), in 0..255.
fn hsv(hue: f32, s: f32, v: f32) -> Rgb {
    let h = hue.rem_euclid(1.0) * 6.0;
    let i = h.floor();
    let f = h - i;
    let (p, q, t) = (v * (1.0 - s), v * (1.0 - s * f), v * (1.0 - s * (1.0 - f)));
    let (r, g, b) = match i as u32 {
        0 => (v, t, p),
        1 => (q, v, p),
        2 => (p, v, t),
        3 => (p, q, v),
        4 => (t, p, v),
        _ => (v, p, q),
    };
    Rgb([r * 255.0, g * 255.0, b * 255.0])
}

/// Side of the per-image detail tile (power of two: lookups wrap with a mask).
const DETAIL_TILE: usize = 512;

/// Fine-detail source: a tileable-enough square of fractal noise in [-1, 1], sampled with an integer offset
/// and stride per use so that different regions of an image get different-looking texture.
struct DetailTile(Vec<f32>);

impl DetailTile {
    /// Fractal noise of `octaves` octaves whose coarsest lattice is `base_px`, rescaled to unit standard
    /// deviation so texture amplitudes below are in grey levels (1σ).
    fn new(key: u32, base_px: f32, octaves: u32) -> Self {
        let n = DETAIL_TILE;
        let mut v = vec![0f32; n * n];
        for y in 0..n {
            for x in 0..n {
                v[y * n + x] = fbm(x as f32 / base_px, y as f32 / base_px, octaves, 0.7, key);
            }
        }
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f32>() / v.len() as f32;
        let inv_std = 1.0 / var.sqrt().max(1e-6);
        v.iter_mut().for_each(|a| *a = (*a - mean) * inv_std);
        Self(v)
    }
    #[inline]
    fn at(&self, x: usize, y: usize) -> f32 {
        self.0[(y & (DETAIL_TILE - 1)) * DETAIL_TILE + (x & (DETAIL_TILE - 1))]
    }
}

/// A low-frequency scalar field evaluated every `step` pixels and bilinearly interpolated.
struct CoarseField {
    step: usize,
    cols: usize,
    v: Vec<f32>,
}

impl CoarseField {
    fn new(w: usize, h: usize, step: usize, f: impl Fn(f32, f32) -> f32) -> Self {
        let (cols, rows) = (w / step + 2, h / step + 2);
        let mut v = Vec::with_capacity(cols * rows);
        for gy in 0..rows {
            for gx in 0..cols {
                v.push(f((gx * step) as f32, (gy * step) as f32));
            }
        }
        Self { step, cols, v }
    }
    #[inline]
    fn at(&self, x: usize, y: usize) -> f32 {
        let (gx, gy) = (x / self.step, y / self.step);
        let inv = 1.0 / self.step as f32;
        let (tx, ty) = ((x % self.step) as f32 * inv, (y % self.step) as f32 * inv);
        let i = gy * self.cols + gx;
        let (a, b, c, d) = (self.v[i], self.v[i + 1], self.v[i + self.cols], self.v[i + self.cols + 1]);
        let top = a + (b - a) * tx;
        top + (c + (d - c) * tx - top) * ty
    }
}

#[derive(Clone, Copy)]
enum Texture {
    /// Smooth surface: only the global grain.
    Smooth,
    /// Parallel stripes (fabric, fences, windows) of `period_px`, contrast `amp`.
    Stripes { period_px: f32, amp: f32, cos: f32, sin: f32 },
    /// Fine noise (foliage, gravel, fur) of amplitude `amp`, from the detail tile at `stride`.
    Grain { amp: f32, stride: usize, offset: usize },
}

#[derive(Clone, Copy)]
struct Shape {
    ellipse: bool,
    cx: f32,
    cy: f32,
    rx: f32,
    ry: f32,
    cos: f32,
    sin: f32,
    edge_px: f32,
    color_a: Rgb,
    color_b: Rgb,
    texture: Texture,
    opacity: f32,
}

impl Shape {
    fn random(r: &mut SplitMix64, hue: f32, wf: f32, hf: f32, size: (f32, f32), busy: f32) -> Self {
        let scale = wf.min(hf);
        let angle = r.range(0.0, std::f32::consts::PI);
        let texture = match r.unit() {
            u if u < 0.3 => Texture::Smooth,
            u if u < 0.5 => {
                let a = r.range(0.0, std::f32::consts::PI);
                Texture::Stripes {
                    period_px: r.range(3.0, 14.0),
                    amp: busy * r.range(10.0, 40.0),
                    cos: a.cos(),
                    sin: a.sin(),
                }
            }
            _ => Texture::Grain {
                amp: busy * r.range(10.0, 40.0),
                stride: r.int(1, 2) as usize,
                offset: r.int(0, 4095) as usize,
            },
        };
        Shape {
            ellipse: r.unit() < 0.55,
            cx: r.range(-0.1, 1.1) * wf,
            cy: r.range(0.05, 1.05) * hf,
            rx: r.range(size.0, size.1) * scale,
            ry: r.range(size.0, size.1) * scale,
            cos: angle.cos(),
            sin: angle.sin(),
            edge_px: r.range(0.7, 3.0),
            color_a: hsv(hue + r.range(-0.5, 0.5), r.range(0.1, 0.95), r.range(0.1, 1.0)),
            color_b: hsv(hue + r.range(-0.5, 0.5), r.range(0.1, 0.95), r.range(0.1, 1.0)),
            texture,
            opacity: r.range(0.75, 1.0),
        }
    }

    /// Blend this shape into `px` (RGB f32 rows of width `w`).
    fn draw(&self, px: &mut [f32], w: usize, h: usize, detail: &DetailTile) {
        let reach = self.rx.max(self.ry) + self.edge_px + 2.0;
        let x0 = (self.cx - reach).floor().max(0.0) as usize;
        let x1 = (self.cx + reach).ceil().clamp(0.0, w as f32) as usize;
        let y0 = (self.cy - reach).floor().max(0.0) as usize;
        let y1 = (self.cy + reach).ceil().clamp(0.0, h as f32) as usize;
        let (inv_rx, inv_ry) = (1.0 / self.rx, 1.0 / self.ry);
        let (r_min, inv_edge) = (self.rx.min(self.ry), 1.0 / self.edge_px);
        for y in y0..y1 {
            let dy = y as f32 + 0.5 - self.cy;
            for x in x0..x1 {
                let dx = x as f32 + 0.5 - self.cx;
                let (lx, ly) = (dx * self.cos + dy * self.sin, -dx * self.sin + dy * self.cos);
                // Signed distance in px (approximate for ellipses), negative inside.
                let dist = if self.ellipse {
                    (((lx * inv_rx).powi(2) + (ly * inv_ry).powi(2)).sqrt() - 1.0) * r_min
                } else {
                    (lx.abs() - self.rx).max(ly.abs() - self.ry)
                };
                let alpha = (0.5 - dist * inv_edge).clamp(0.0, 1.0) * self.opacity;
                if alpha <= 0.0 {
                    continue;
                }
                let mut c = self.color_a.lerp(self.color_b, (ly * inv_ry * 0.5 + 0.5).clamp(0.0, 1.0));
                // Lit from the top-left.
                let shade = 1.0 - 0.25 * ((lx * inv_rx + ly * inv_ry) * 0.5).clamp(-1.0, 1.0);
                let texture = match self.texture {
                    Texture::Smooth => 0.0,
                    Texture::Stripes { period_px, amp, cos, sin } => {
                        amp * ((dx * cos + dy * sin) / period_px * std::f32::consts::TAU).sin()
                    }
                    Texture::Grain { amp, stride, offset } => {
                        amp * detail.at(x * stride + offset, y * stride + offset / 7)
                    }
                };
                let o = (y * w + x) * 3;
                for ch in 0..3 {
                    c.0[ch] = c.0[ch] * shade + texture;
                    px[o + ch] += (c.0[ch] - px[o + ch]) * alpha;
                }
            }
        }
    }
}

/// Paints the images of the dataset generated with one seed. Holds the fine-detail tile, which is the same
/// for every image of the seed (images differ by where and at which stride they sample it); build one per
/// thread.
pub struct SyntheticPainter {
    seed: u64,
    detail: DetailTile,
}

impl SyntheticPainter {
    /// The painter of the dataset generated with `seed` (~20 ms: fills the detail tile).
    pub fn new(seed: u64) -> Self {
        let mut r = SplitMix64::keyed(seed, u64::MAX, 3);
        Self { seed, detail: DetailTile::new(r.next_u64() as u32, DETAIL_BASE_PX, 3) }
    }

    /// Paint image `plan`: packed RGB, or gray for [`Subsampling::Gray`], of `width*height*channels`
    /// bytes. Depends only on (seed, plan).
    pub fn paint(&self, plan: &SyntheticImagePlan) -> Vec<u8> {
        paint(self.seed, plan, &self.detail)
    }
}

/// Coarsest lattice of the detail tile, in pixels.
const DETAIL_BASE_PX: f32 = 3.0;

fn paint(seed: u64, plan: &SyntheticImagePlan, detail: &DetailTile) -> Vec<u8> {
    let (w, h) = (plan.width as usize, plan.height as usize);
    let (wf, hf) = (w as f32, h as f32);
    let mut r = SplitMix64::keyed(seed, u64::from(plan.index), 2);
    let key = r.next_u64() as u32;

    // Scene palette: the class biases the dominant hue so classes differ visibly (a model could learn them).
    let hue = plan.class as f32 / SYNTHETIC_CLASSES as f32 + r.range(-0.06, 0.06);
    let sky_top = hsv(hue + r.range(-0.1, 0.1), r.range(0.15, 0.6), r.range(0.55, 0.95));
    let sky_bottom = hsv(hue + r.range(-0.15, 0.15), r.range(0.05, 0.4), r.range(0.6, 1.0));
    let ground_top = hsv(hue + r.range(0.2, 0.5), r.range(0.25, 0.8), r.range(0.3, 0.75));
    let ground_bottom = hsv(hue + r.range(0.2, 0.6), r.range(0.3, 0.9), r.range(0.1, 0.5));
    let side_tint = hsv(r.unit(), r.range(0.2, 0.7), r.range(0.3, 0.9));
    let side_weight = r.range(0.0, 0.35);
    let horizon = r.range(0.25, 0.65);
    let horizon_tilt = r.range(-0.15, 0.15);
    let cloud_scale_px = r.range(40.0, 160.0) * (wf.max(hf) / 500.0);
    let cloud_amp = r.range(0.08, 0.3);
    // How busy the scene is (a lawn vs. a clear sky): spreads file sizes like real photos (ImageNet's
    // bytes/pixel at q~90 run from ~0.2 to ~1.0 between its 10th and 90th percentiles).
    let busy = r.range(-1.2, 1.4).exp();
    let sky_detail_amp = busy * r.range(5.0, 16.0);
    let ground_detail_amp = busy * r.range(22.0, 55.0);
    let ground_stride = r.int(1, 2) as usize;
    let grain_amp = busy * r.range(3.0, 7.0);
    let vignette = r.range(0.0, 0.35);
    let (detail_dx, detail_dy) = (r.int(0, 4095) as usize, r.int(0, 4095) as usize);

    // Low-frequency fields: cloud lighting and the horizon line (per column).
    let clouds = CoarseField::new(w, h, 8, |x, y| {
        1.0 + cloud_amp * fbm(x / cloud_scale_px, y / cloud_scale_px, 4, 0.5, key ^ 0x22)
    });
    let horizon_row: Vec<f32> = (0..w)
        .map(|x| {
            let u = (x as f32 + 0.5) / wf;
            (horizon
                + horizon_tilt * (u - 0.5)
                + 0.06 * fbm(x as f32 / (cloud_scale_px * 0.5), 3.5, 3, 0.5, key ^ 0x11))
                * hf
        })
        .collect();

    // 1. Background: sky over textured ground with a soft horizon, lit by large clouds.
    let mut px = vec![0f32; w * h * 3];
    for y in 0..h {
        let yf = y as f32 + 0.5;
        for (x, &horizon_y) in horizon_row.iter().enumerate() {
            let t_ground = ((yf - horizon_y) / 3.0).clamp(-1.0, 1.0) * 0.5 + 0.5; // ~6 px soft edge
            let sky = sky_top.lerp(sky_bottom, (yf / horizon_y.max(1.0)).min(1.0));
            let ground = ground_top.lerp(ground_bottom, ((yf - horizon_y) / (hf - horizon_y).max(1.0)).clamp(0.0, 1.0));
            let c = sky.lerp(ground, t_ground).lerp(side_tint, side_weight * (x as f32 / wf));
            let light = clouds.at(x, y);
            let fine = detail.at(x * ground_stride + detail_dx, y * ground_stride + detail_dy);
            let texture = fine * (sky_detail_amp + (ground_detail_amp - sky_detail_amp) * t_ground);
            let o = (y * w + x) * 3;
            for ch in 0..3 {
                px[o + ch] = c.0[ch] * light + texture;
            }
        }
    }

    // 2. Objects: a few large ones and some clutter, soft-edged, shaded, some textured.
    let large = r.int(3, 9);
    let small = r.int(5, 30);
    let mut shapes: Vec<Shape> = (0..large).map(|_| Shape::random(&mut r, hue, wf, hf, (0.08, 0.4), busy)).collect();
    shapes.extend((0..small).map(|_| Shape::random(&mut r, hue, wf, hf, (0.01, 0.07), busy)));
    for s in &shapes {
        s.draw(&mut px, w, h, detail);
    }

    // 3. Camera: vignette and sensor grain (mostly luminance, a little chroma), then quantize.
    let channels = encode::input_channels(plan.subsampling);
    let mut out = vec![0u8; w * h * channels];
    let grain_scale = grain_amp / 128.0;
    for y in 0..h {
        let v = (y as f32 + 0.5) / hf - 0.5;
        for x in 0..w {
            let u = (x as f32 + 0.5) / wf - 0.5;
            let vig = 1.0 - vignette * (u * u + v * v) * 2.0;
            // One hash per pixel: byte 0 → luminance grain, bytes 1..3 → chroma grain.
            let bits = hash3(x as i32, y as i32, key ^ 0x44);
            let luma = ((bits & 0xFF) as f32 - 127.5) * grain_scale;
            let o = (y * w + x) * 3;
            let mut rgb = [0f32; 3];
            for (ch, value) in rgb.iter_mut().enumerate() {
                let chroma = (((bits >> (8 * (ch + 1))) & 0xFF) as f32 - 127.5) * grain_scale * 0.35;
                *value = (px[o + ch] * vig + luma + chroma).clamp(0.0, 255.0);
            }
            if channels == 1 {
                out[y * w + x] = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]).round() as u8;
            } else {
                for ch in 0..3 {
                    out[o + ch] = rgb[ch].round() as u8;
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------------------
// The dataset on disk
// ---------------------------------------------------------------------------------------------------------

/// What a generation produced (or found already complete).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntheticDatasetSummary {
    /// The dataset root (ImageFolder layout).
    pub root: PathBuf,
    /// Number of images.
    pub images: u32,
    /// Total bytes of the JPEG files (0 when the dataset already existed).
    pub jpeg_bytes: u64,
    /// Total pixels of all images (0 when the dataset already existed).
    pub pixels: u64,
    /// False when a complete dataset with the same marker was already there.
    pub generated: bool,
}

/// Marker contents identifying a complete dataset of `count` images from `seed`.
pub fn synthetic_marker(count: u32, seed: u64) -> String {
    format!("trdata {SYNTHETIC_VERSION}\ncount={count}\nseed={seed}\nclasses={SYNTHETIC_CLASSES}\nlayout=imagefolder\n")
}

/// True when `root` holds a complete synthetic dataset of `count` images from `seed`.
pub fn synthetic_dataset_is_complete(root: &Path, count: u32, seed: u64) -> bool {
    fs::read_to_string(root.join(SYNTHETIC_MARKER_FILE)).is_ok_and(|m| m == synthetic_marker(count, seed))
}

/// Generate the synthetic dataset of `count` images from `seed` into `root` (ImageFolder layout, classes
/// `class_00`..`class_09`) using `threads` threads, unless a complete one is already there. `progress` is
/// called with the number of images finished so far (from worker threads; keep it cheap); when it returns
/// `false` the generation stops, its temp folder is removed and the result is `ErrorKind::Interrupted`.
///
/// Fails with `AlreadyExists` if `root` exists but is not this exact synthetic dataset (never overwrites
/// user data).
pub fn generate_synthetic_dataset(
    root: &Path,
    count: u32,
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u32) -> bool + Sync),
) -> io::Result<SyntheticDatasetSummary> {
    let existing = |generated| SyntheticDatasetSummary {
        root: root.to_path_buf(),
        images: count,
        jpeg_bytes: 0,
        pixels: 0,
        generated,
    };
    if synthetic_dataset_is_complete(root, count, seed) {
        return Ok(existing(false));
    }
    if root.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists but is not a complete trdata {SYNTHETIC_VERSION} dataset of {count} images (seed {seed}); \
                 remove it or choose another folder",
                root.display()
            ),
        ));
    }
    if count == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "count must be at least 1"));
    }
    let name = root
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{} has no folder name", root.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = match root.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent)?;
    remove_stale_temp_dirs(&parent, &name);

    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let temp = parent.join(format!(".{name}.tmp-{}-{nanos}", std::process::id()));
    fs::create_dir(&temp)?;
    let result = write_images(&temp, count, seed, threads.max(1), progress).and_then(|(bytes, pixels)| {
        fs::write(temp.join(SYNTHETIC_MARKER_FILE), synthetic_marker(count, seed))?;
        Ok((bytes, pixels))
    });
    let (jpeg_bytes, pixels) = match result {
        Ok(v) => v,
        Err(e) => {
            let _ = fs::remove_dir_all(&temp);
            return Err(e);
        }
    };
    match fs::rename(&temp, root) {
        Ok(()) => {
            Ok(SyntheticDatasetSummary { root: root.to_path_buf(), images: count, jpeg_bytes, pixels, generated: true })
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&temp);
            // Another process published the same dataset first: theirs is as good as ours.
            if synthetic_dataset_is_complete(root, count, seed) { Ok(existing(false)) } else { Err(e) }
        }
    }
}

/// Remove `.NAME.tmp-PID-*` folders left by generations whose process no longer exists.
fn remove_stale_temp_dirs(parent: &Path, name: &str) {
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file_name.strip_prefix(&prefix) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let alive = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Paint and encode all images into `dir` on `threads` threads (dynamic claiming by an atomic counter).
fn write_images(
    dir: &Path,
    count: u32,
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u32) -> bool + Sync),
) -> io::Result<(u64, u64)> {
    for class in 0..SYNTHETIC_CLASSES.min(count) {
        fs::create_dir(dir.join(format!("class_{class:02}")))?;
    }
    let next = AtomicU32::new(0);
    let done = AtomicU32::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<io::Error>> = Mutex::new(None);
    let totals = Mutex::new((0u64, 0u64));
    std::thread::scope(|scope| {
        for t in 0..threads.min(count as usize) {
            let (next, done, failed, first_error, totals) = (&next, &done, &failed, &first_error, &totals);
            std::thread::Builder::new()
                .name(format!("trdata-gen{t}"))
                .spawn_scoped(scope, move || {
                    let work = || -> io::Result<(u64, u64)> {
                        let mut encoder = JpegEncoder::new()?;
                        let painter = SyntheticPainter::new(seed);
                        let (mut bytes, mut pixels) = (0u64, 0u64);
                        loop {
                            if failed.load(Ordering::Relaxed) {
                                break;
                            }
                            let index = next.fetch_add(1, Ordering::Relaxed);
                            if index >= count {
                                break;
                            }
                            let plan = SyntheticImagePlan::new(seed, index);
                            let image = painter.paint(&plan);
                            let jpeg =
                                encoder.encode(&image, plan.width, plan.height, plan.quality, plan.subsampling)?;
                            fs::write(dir.join(plan.relative_path()), &jpeg)?;
                            bytes += jpeg.len() as u64;
                            pixels += u64::from(plan.width) * u64::from(plan.height);
                            if !progress(done.fetch_add(1, Ordering::Relaxed) + 1) {
                                return Err(io::Error::new(io::ErrorKind::Interrupted, "generation cancelled"));
                            }
                        }
                        Ok((bytes, pixels))
                    };
                    match work() {
                        Ok((b, p)) => {
                            let mut t = totals.lock().unwrap_or_else(|e| e.into_inner());
                            t.0 += b;
                            t.1 += p;
                        }
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        }
                    }
                })
                .map_err(|e| {
                    failed.store(true, Ordering::Relaxed);
                    first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                })
                .ok();
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    Ok(totals.into_inner().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_deterministic_and_realistic() {
        let plans: Vec<_> = (0..1000).map(|i| SyntheticImagePlan::new(0, i)).collect();
        assert_eq!(plans, (0..1000).map(|i| SyntheticImagePlan::new(0, i)).collect::<Vec<_>>());
        let portrait = plans.iter().filter(|p| p.height > p.width).count();
        assert!((150..350).contains(&portrait), "portrait {portrait}");
        assert!(plans.iter().any(|p| p.width.max(p.height) >= 1000));
        assert!(plans.iter().any(|p| p.width.max(p.height) <= 250));
        let s420 = plans.iter().filter(|p| p.subsampling == Subsampling::S420).count();
        assert!(s420 > 750, "4:2:0 {s420}");
        assert!(plans.iter().all(|p| (85..=95).contains(&p.quality)));
        assert_ne!(SyntheticImagePlan::new(1, 5), SyntheticImagePlan::new(0, 5));
    }

    #[test]
    fn encoder_produces_jpeg_of_photo_like_size() {
        let plan = SyntheticImagePlan {
            index: 3,
            class: 3,
            width: 500,
            height: 375,
            quality: 90,
            subsampling: Subsampling::S420,
        };
        let pixels = SyntheticPainter::new(0).paint(&plan);
        assert_eq!(pixels, SyntheticPainter::new(0).paint(&plan), "painting is deterministic");
        let jpeg = JpegEncoder::new().unwrap().encode(&pixels, 500, 375, 90, Subsampling::S420).unwrap();
        assert_eq!(&jpeg[..3], &[0xFF, 0xD8, 0xFF]);
        assert_eq!(&jpeg[jpeg.len() - 2..], &[0xFF, 0xD9]);
        let bytes_per_pixel = jpeg.len() as f64 / (500.0 * 375.0);
        // Flat colour would be ~0.02 B/px; photos at q90 are ~0.3-1.0.
        assert!(bytes_per_pixel > 0.15, "too compressible: {bytes_per_pixel}");
    }

    #[test]
    fn generation_is_atomic_and_idempotent() {
        let base = std::env::temp_dir().join(format!("trdata-enc-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let root = base.join("synthetic");
        let s = generate_synthetic_dataset(&root, 23, 7, 2, &|_| true).unwrap();
        assert!(s.generated && s.jpeg_bytes > 0);
        assert!(synthetic_dataset_is_complete(&root, 23, 7));
        let files: usize = (0..10).map(|c| fs::read_dir(root.join(format!("class_{c:02}"))).unwrap().count()).sum();
        assert_eq!(files, 23);
        assert!(!generate_synthetic_dataset(&root, 23, 7, 1, &|_| true).unwrap().generated);
        // Same seed, other thread count → same bytes.
        let root1 = base.join("one-thread");
        generate_synthetic_dataset(&root1, 23, 7, 1, &|_| true).unwrap();
        let p = SyntheticImagePlan::new(7, 11).relative_path();
        assert_eq!(fs::read(root.join(&p)).unwrap(), fs::read(root1.join(&p)).unwrap());
        // A different request on the same folder is refused, not overwritten.
        assert_eq!(
            generate_synthetic_dataset(&root, 24, 7, 1, &|_| true).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        // A cancelled generation leaves nothing behind.
        let cancelled = base.join("cancelled");
        let e = generate_synthetic_dataset(&cancelled, 23, 7, 2, &|done| done < 5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Interrupted);
        assert!(!cancelled.exists());
        // No temp folder is left behind.
        assert!(fs::read_dir(&base).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().contains(".tmp-")));
        let _ = fs::remove_dir_all(&base);
    }
}
