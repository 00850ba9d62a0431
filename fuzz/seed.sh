#!/bin/sh
# Seed the fuzz corpora from the real edge-case files (../../shared/data/edge-cases, or $TRDATA_TEST_DATA/edge-cases).
# jpeg_decode inputs start with 5 control bytes (scale, window), so its seeds get a prefix.
set -eu
cd "$(dirname "$0")"
src="${TRDATA_TEST_DATA:-../../shared/data}/edge-cases"
for t in jpeg_header jpeg_decode png_decode jpeg_markers other_decode exif_orientation packed_open gpu_eligible pack_destination coco_mask; do mkdir -p "corpus/$t"; done
for f in "$src"/*; do
    n=$(basename "$f")
    [ "$(wc -c < "$f")" -le 600000 ] || continue   # skip the multi-MB photos: slow seeds, nothing new
    cp "$f" "corpus/jpeg_header/$n"
    cp "$f" "corpus/gpu_eligible/$n"
    case "$n" in
        *.png|*.JPEG) cp "$f" "corpus/png_decode/$n" ;;
        *) cp "$f" "corpus/jpeg_markers/$n"; { printf '\003\020\000\010\000'; cat "$f"; } > "corpus/jpeg_decode/$n" ;;
    esac
done
# exif_orientation: the orientation files as they are (parsed as containers), and minimal IFD0s (LE, BE) with
# Orientation 6 (LE) and 8 (BE) behind the 8 control bytes (full scale, whole image, payload prefixed with Exif\0\0).
for f in "$src"/exif_orient* "$src"/tiny_8x8__exif_gps.jpg; do cp "$f" corpus/exif_orientation/; done
printf '\007\000\000\377\377\000\000\000II*\000\010\000\000\000\001\000\022\001\003\000\001\000\000\000\006\000\000\000\000\000\000\000' \
    > corpus/exif_orientation/ifd_le_6
printf '\007\000\000\377\377\000\000\000MM\000*\000\000\000\010\000\001\001\022\000\003\000\000\000\001\000\010\000\000\000\000\000\000' \
    > corpus/exif_orientation/ifd_be_8
# gpu_eligible: also the Pillow-written header variants (Adobe RGB, XMP orientation, restart intervals).
cp ../tests/fixtures/pillow-jpeg/*.jpg corpus/gpu_eligible/
echo "seeded from $src (other_decode: seed it with small WebP/GIF/TIFF/BMP/PPM files, e.g. written by Pillow)"
# coco_mask: mode byte, two big-endian u16 sides (top bit clear: taken mod 40), then the segmentation.
printf '\000\000\003\000\004237' > corpus/coco_mask/string_3x4
printf '\000\000\012\000\014;192N3M01N1O1O1Om0' > corpus/coco_mask/string_10x12
printf '\002\000\012\000\014\012\000\012\000\137\000\024\000\050\000\120\000' > corpus/coco_mask/polygon_10x12
printf '\003\000\003\000\004\002\000\003\000\007\000' > corpus/coco_mask/counts_3x4
