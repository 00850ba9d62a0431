//! EXIF orientation (`trdata::decode::exif`) on arbitrary bytes, and the oriented decode it drives.
//!
//! 1. The parsers: the raw input as a JPEG, PNG, WebP and TIFF container, as a bare TIFF structure (EXIF and
//!    file rules), as an EXIF block with XMP: no panic, and every answer is one of the 8 orientations.
//! 2. Through the decoder: the input (after 8 control bytes) becomes an APP1 segment (`Exif\0\0` + input, XMP
//!    namespace + input, or the input as is) inserted into a good 37×22 JPEG, decoded with `exif_transpose` at a
//!    fuzzer-chosen DCT scale and window. The region must cover the window (clamped), lie inside the oriented
//!    image, hold `stride × height` bytes and the oriented size the header reported; at full scale the window's
//!    pixels are the stored image's, transposed by the orientation the parser found.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trdata::decode::exif::{self, Rect};
use trdata::decode::{DecodeLimits, Decoder, ImageFormat, PixelWindow};

const W: u32 = 37;
const H: u32 = 22;

struct State {
    decoder: Decoder,
    good: Vec<u8>,
    /// The good JPEG decoded at full size, stored order.
    stored: Vec<u8>,
}

thread_local! {
    static STATE: std::cell::RefCell<State> = std::cell::RefCell::new({
        let mut e = trdata::synthetic::encode::JpegEncoder::new().unwrap();
        let px: Vec<u8> = (0..W * H * 3).map(|i| (i * 7 % 251) as u8).collect();
        let good = e.encode(&px, W, H, 90, trdata::decode::Subsampling::S420).unwrap();
        let mut stored = Vec::new();
        Decoder::new().unwrap().decode_full_rgb(&good, &mut stored).unwrap();
        let limits = DecodeLimits { exif_transpose: true, ..DecodeLimits::default() };
        State { decoder: Decoder::with_limits(limits).unwrap(), good, stored }
    });
}

fuzz_target!(|data: &[u8]| {
    for f in [ImageFormat::Jpeg, ImageFormat::Png, ImageFormat::WebP, ImageFormat::Tiff] {
        let o = exif::orientation(f, data);
        assert!((1..=8).contains(&o.exif_value()));
    }
    let _ = exif::tiff_orientation(data, false);
    let _ = exif::tiff_orientation(data, true);
    let _ = exif::exif_block_orientation(Some(data), Some(data));
    let _ = exif::xmp_orientation(data);
    if data.len() < 8 {
        return;
    }
    let scale = data[0] % 8 + 1;
    let (x0, y0) = (u32::from(data[1]), u32::from(data[2]));
    let (x1, y1) = (x0 + u32::from(data[3]), y0 + u32::from(data[4]));
    let payload = &data[8..];
    let payload: Vec<u8> = match data[5] % 3 {
        0 => [b"Exif\0\0".as_slice(), payload].concat(),
        1 => [b"http://ns.adobe.com/xap/1.0/\0".as_slice(), payload].concat(),
        _ => payload.to_vec(),
    };
    if payload.len() > 65_000 {
        return;
    }
    STATE.with(|s| {
        let s = &mut *s.borrow_mut();
        let mut jpeg = s.good[..2].to_vec();
        jpeg.extend([0xFF, 0xE1]);
        jpeg.extend(((payload.len() + 2) as u16).to_be_bytes());
        jpeg.extend(&payload);
        jpeg.extend(&s.good[2..]);
        let o = exif::orientation(ImageFormat::Jpeg, &jpeg);
        let info = s.decoder.read_header(&jpeg).expect("the good JPEG's header");
        assert_eq!(info.orientation, o);
        assert_eq!((info.width, info.height), o.oriented_size(W, H));
        let (sw, sh) = info.scaled_size(scale);
        let r = s.decoder.decode_window(&jpeg, scale, PixelWindow { x0, y0, x1, y1 }).expect("the good JPEG");
        assert_eq!((r.scaled_width, r.scaled_height), (sw, sh));
        assert_eq!(r.pixels.len(), r.stride * r.height as usize);
        assert!(r.x0 + r.width <= sw && r.y0 + r.height <= sh);
        let cx0 = x0.min(sw - 1);
        let cy0 = y0.min(sh - 1);
        assert!(r.x0 <= cx0 && x1.clamp(cx0 + 1, sw) <= r.x0 + r.width, "{r:?}");
        assert!(r.y0 <= cy0 && y1.clamp(cy0 + 1, sh) <= r.y0 + r.height, "{r:?}");
        if scale == 8 {
            // The window's pixels (the region's margin, iMCU alignment and guard, may differ from a full decode).
            for y in cy0..y1.clamp(cy0 + 1, sh) {
                let row = r.row(y - r.y0);
                for x in cx0..x1.clamp(cx0 + 1, sw) {
                    let p = o.stored_rect(Rect { x0: x, y0: y, x1: x + 1, y1: y + 1 }, W, H);
                    let at = 3 * (p.y0 * W + p.x0) as usize;
                    let got = 3 * (x - r.x0) as usize;
                    assert_eq!(row[got..got + 3], s.stored[at..at + 3], "{o:?} ({x}, {y})");
                }
            }
        }
    });
});
