#!/bin/sh
# Seed the fuzz corpora from the real edge-case files (../../shared/data/edge-cases, or $TRDATA_TEST_DATA/edge-cases).
# jpeg_decode inputs start with 5 control bytes (scale, window), so its seeds get a prefix.
set -eu
cd "$(dirname "$0")"
src="${TRDATA_TEST_DATA:-../../shared/data}/edge-cases"
for t in jpeg_header jpeg_decode png_decode jpeg_markers other_decode exif_orientation packed_open gpu_eligible pack_destination; do mkdir -p "corpus/$t"; done
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
