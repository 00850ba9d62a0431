#!/bin/sh
# Seed the fuzz corpora from the real edge-case files (../../shared/data/edge-cases, or $TRDATA_TEST_DATA/edge-cases).
# jpeg_decode inputs start with 5 control bytes (scale, window), so its seeds get a prefix.
set -eu
cd "$(dirname "$0")"
src="${TRDATA_TEST_DATA:-../../shared/data}/edge-cases"
for t in jpeg_header jpeg_decode png_decode jpeg_markers other_decode packed_open; do mkdir -p "corpus/$t"; done
for f in "$src"/*; do
    n=$(basename "$f")
    [ "$(wc -c < "$f")" -le 600000 ] || continue   # skip the multi-MB photos: slow seeds, nothing new
    cp "$f" "corpus/jpeg_header/$n"
    case "$n" in
        *.png|*.JPEG) cp "$f" "corpus/png_decode/$n" ;;
        *) cp "$f" "corpus/jpeg_markers/$n"; { printf '\003\020\000\010\000'; cat "$f"; } > "corpus/jpeg_decode/$n" ;;
    esac
done
echo "seeded from $src (other_decode: seed it with small WebP/GIF/TIFF/BMP/PPM files, e.g. written by Pillow)"
