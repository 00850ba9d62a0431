//! color — channel conversion inside the fused writer (augment, between decode and the resample passes): when
//! the output's channel count (`channels=`) differs from the source's, the filter window of the crop is
//! converted before resampling — RGB to luma exactly as Pillow's `Image.convert("L")`, gray to RGB as Pillow's
//! `Image.convert("RGB")` — so the passes always run on the output's format. Only the window the taps read is
//! converted, never the whole decoded region, into the worker's scratch (no allocation per sample).

/// Pillow's RGB → L (`rgb2l` in libImaging/Convert.c, whose `L24` macro is ITU-R 601-2 luma in 16-bit fixed
/// point, rounded half up): `L = (R·19595 + G·38470 + B·7471 + 0x8000) >> 16`. The weights sum to 65536, so a
/// gray pixel (v, v, v) gives v back exactly (a gray JPEG, which the decoder widens to RGB, keeps its values).
/// The largest sum, 255·65536 + 0x8000, fits a `u32`. `rgb` holds 3 bytes per `luma` byte.
#[inline(always)]
pub(crate) fn rgb_to_luma(rgb: &[u8], luma: &mut [u8]) {
    debug_assert_eq!(rgb.len(), 3 * luma.len());
    for (l, p) in luma.iter_mut().zip(rgb.chunks_exact(3)) {
        let sum = u32::from(p[0]) * 19595 + u32::from(p[1]) * 38470 + u32::from(p[2]) * 7471 + 0x8000;
        *l = (sum >> 16) as u8;
    }
}

/// Gray → RGB: each value three times (Pillow's `l2rgb`).
#[inline(always)]
pub(crate) fn gray_to_rgb(gray: &[u8], rgb: &mut [u8]) {
    debug_assert_eq!(3 * gray.len(), rgb.len());
    for (p, &v) in rgb.chunks_exact_mut(3).zip(gray) {
        p.copy_from_slice(&[v, v, v]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ITU-R 601-2 formula with the weights Pillow documents (299/587/114 per mille), in exact rational
    /// arithmetic, rounded half up: the L24 fixed point must agree with it wherever the two differ by less than
    /// the fixed point's error, and be exact on gray.
    #[test]
    fn luma_is_pillows_l24_and_exact_on_gray() {
        let mut worst = 0.0f64;
        for r in (0..=255u32).step_by(3) {
            for g in (0..=255u32).step_by(5) {
                for b in 0..=255u32 {
                    let mut l = [0u8];
                    rgb_to_luma(&[r as u8, g as u8, b as u8], &mut l);
                    let exact = f64::from(r * 299 + g * 587 + b * 114) / 1000.0;
                    worst = worst.max((f64::from(l[0]) - exact).abs());
                    // L24 by its definition, independently of the kernel's expression
                    assert_eq!(u32::from(l[0]), (r * 19595 + g * 38470 + b * 7471 + 32768) / 65536);
                }
            }
        }
        assert!(worst <= 0.51, "{worst}");
        for v in 0..=255u8 {
            let mut l = [0u8];
            rgb_to_luma(&[v, v, v], &mut l);
            assert_eq!(l[0], v);
            let mut rgb = [0u8; 3];
            gray_to_rgb(&[v], &mut rgb);
            assert_eq!(rgb, [v, v, v]);
        }
        // What Pillow 13.0 gives for Image.new("RGB", (1, 1), c).convert("L") (tests/test_channels.py compares
        // whole images with the installed Pillow).
        for (rgb, want) in [([255u8, 0, 0], 76u8), ([0, 255, 0], 150), ([0, 0, 255], 29), ([12, 200, 99], 132)] {
            let mut l = [0u8];
            rgb_to_luma(&rgb, &mut l);
            assert_eq!(l[0], want, "{rgb:?}");
        }
    }
}
