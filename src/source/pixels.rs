//! source/pixels — raw uint8 pixels in memory, decoded by nobody (`trdata.Arrays`: numpy's (N, H, W[, C])):
//! sample i is the i-th `height × width × channels` image of one contiguous buffer, read in place.

use super::{Dataset, ImageStore, LABELS, RawImage, ReadCtx, SampleBytes, StoreBytes, content_identity};
use crate::error::{ImageError, Result, TrdataError};
use std::path::PathBuf;

/// N images of `height × width × channels` uint8 pixels, row-major and contiguous (numpy's (N, H, W[, C])).
#[derive(Debug, Clone)]
pub struct PixelArray {
    /// All images, image i at `i * image_bytes()`.
    pub data: Vec<u8>,
    /// Rows per image.
    pub height: u32,
    /// Columns per image.
    pub width: u32,
    /// 1 (gray) or 3 (RGB).
    pub channels: u8,
}

impl PixelArray {
    /// Bytes of one image.
    pub fn image_bytes(&self) -> usize {
        self.height as usize * self.width as usize * usize::from(self.channels)
    }

    /// The pixels of image `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.image_bytes();
        &self.data[i * n..(i + 1) * n]
    }

    /// Image `i` as a raw image.
    pub fn raw(&self, i: usize) -> RawImage<'_> {
        RawImage { pixels: self.image(i), height: self.height, width: self.width, channels: self.channels }
    }
}

impl ImageStore for PixelArray {
    fn kind(&self) -> &'static str {
        "arrays"
    }

    fn len(&self) -> usize {
        self.data.len() / self.image_bytes().max(1)
    }

    fn sample_name(&self, i: usize) -> PathBuf {
        PathBuf::from(format!("<memory>[{i}]"))
    }

    fn read<'s>(&'s self, i: usize, _how: &ReadCtx<'_>, _buf: &mut Vec<u8>) -> Result<SampleBytes<'s>, ImageError> {
        let shape = (self.height, self.width, self.channels);
        Ok(SampleBytes::held(StoreBytes::Slice(self.image(i))).as_pixels(shape))
    }

    fn identity(&self, labels: &[i64]) -> String {
        let shape = [self.height.to_le_bytes(), self.width.to_le_bytes(), u32::from(self.channels).to_le_bytes()];
        content_identity(self.kind(), &shape.concat(), self.len(), |i| self.image(i), labels)
    }

    fn natural_channels(&self) -> u8 {
        self.channels
    }

    fn uniform_size(&self) -> Option<(u32, u32)> {
        Some((self.height, self.width))
    }
}

/// The `images` parameter's name (its rules: [`arrays`]).
const IMAGES: &str = "images";

/// A dataset of raw uint8 pixels (`trdata.Arrays`): `data` holds `count` images of `height × width × channels`
/// (channels 1 or 3), checked against `data.len()` before anything is kept; one label per image.
pub fn arrays(
    data: Vec<u8>,
    count: usize,
    height: u32,
    width: u32,
    channels: usize,
    labels: Vec<i64>,
) -> Result<Dataset> {
    if count == 0 || count > u32::MAX as usize {
        return Err(TrdataError::config(IMAGES, format!("{count} images must be at least one and fewer than 2**32")));
    }
    if height == 0 || width == 0 || height > 65_535 || width > 65_535 {
        return Err(TrdataError::config(IMAGES, format!("{height}×{width} images must be 1..=65535 on each side")));
    }
    if channels != 1 && channels != 3 {
        return Err(TrdataError::config(IMAGES, format!("{channels} channels must be 1 (gray) or 3 (RGB)")));
    }
    let expected = (height as usize).checked_mul(width as usize).and_then(|p| p.checked_mul(channels));
    if expected.and_then(|b| b.checked_mul(count)) != Some(data.len()) {
        return Err(TrdataError::config(
            IMAGES,
            format!("{} bytes must be {count} × {height} × {width} × {channels}", data.len()),
        ));
    }
    if labels.len() != count {
        return Err(TrdataError::config(
            LABELS,
            format!("{} labels must be one per image ({count} images)", labels.len()),
        ));
    }
    let channels = channels as u8; // 1 or 3, checked above
    Ok(Dataset::new(PixelArray { data, height, width, channels }, labels, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::source::config_parameter as param;

    #[test]
    fn arrays_check_every_size_against_the_data_before_keeping_it() {
        let ok = arrays(vec![7; 2 * 3 * 4 * 3], 2, 3, 4, 3, vec![5, 6]).unwrap();
        let a = ok.store_as::<PixelArray>().expect("pixels");
        assert_eq!((a.image_bytes(), a.image(1).len(), ok.len(), a.len()), (36, 36, 2, 2));
        assert_eq!(ok.sample_name(1), PathBuf::from("<memory>[1]"));
        // sizes that do not match the data, overflow, or are out of range: never trusted
        assert_eq!(param(arrays(vec![0; 10], 2, 3, 4, 3, vec![0, 0])), "images");
        assert_eq!(param(arrays(vec![0; 10], usize::MAX, u32::MAX, u32::MAX, 3, vec![])), "images");
        assert_eq!(param(arrays(vec![0; 24], 2, 3, 4, 2, vec![0, 0])), "images");
        assert_eq!(param(arrays(vec![], 0, 3, 4, 1, vec![])), "images");
        assert_eq!(param(arrays(vec![0; 70_000], 1, 70_000, 1, 1, vec![0])), "images");
        assert_eq!(param(arrays(vec![0; 12], 1, 3, 4, 1, vec![0, 1])), "labels");
    }
}
