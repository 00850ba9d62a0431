#!/bin/sh
# Seed the fuzz corpora from the real edge-case files (../../shared/data/edge-cases, or $TRDATA_TEST_DATA/edge-cases).
# jpeg_decode inputs start with 5 control bytes (scale, window), so its seeds get a prefix.
set -eu
cd "$(dirname "$0")"
src="${TRDATA_TEST_DATA:-../../shared/data}/edge-cases"
for t in jpeg_header jpeg_decode png_decode jpeg_markers other_decode exif_orientation packed_open gpu_eligible pack_destination coco_json coco_mask json_lexer tfrecord; do mkdir -p "corpus/$t"; done
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
# coco_json: the first byte picks the input kind (0: a whole file, 1: the inside of an annotation object, 2: bytes
# spliced into a valid file at the position of the second byte).
printf '\000{"images": [{"id": 2, "file_name": "a.jpg", "width": 4, "height": 3}], "annotations": [{"segmentation": [[1.5,2,3,4,5,6]], "area": 2.5, "iscrowd": 0, "image_id": 2, "bbox": [1,2,3,4], "category_id": 1, "id": 7}, {"segmentation": {"counts": [0, 12], "size": [3, 4]}, "iscrowd": 1, "image_id": 2, "bbox": [0,0,4,3], "category_id": 1, "id": 8}, {"segmentation": {"size": [3, 4], "counts": "0<\\\\1"}, "keypoints": [1,2,2], "image_id": 9, "bbox": [0,0,1,1], "category_id": 1, "id": 9}], "categories": [{"id": 1, "name": "p", "keypoints": ["a"], "skeleton": [[1,1]]}]}' > corpus/coco_json/instances
printf '\001"segmentation": [[1,2,3,4,5,6]], "keypoints": [1,2,2], "image_id": 1, "bbox": [0,0,1,1], "category_id": 1, "id": 5' > corpus/coco_json/annotation
printf '\002\200"x": [NaN, 1e400, {"a": [[]]}], ' > corpus/coco_json/splice
echo "seeded from $src (other_decode: seed it with small WebP/GIF/TIFF/BMP/PPM files, e.g. written by Pillow)"
# coco_mask: mode byte, two big-endian u16 sides (top bit clear: taken mod 40), then the segmentation.
printf '\000\000\003\000\004237' > corpus/coco_mask/string_3x4
printf '\000\000\012\000\014;192N3M01N1O1O1Om0' > corpus/coco_mask/string_10x12
printf '\002\000\012\000\014\012\000\012\000\137\000\024\000\050\000\120\000' > corpus/coco_mask/polygon_10x12
printf '\003\000\003\000\004\002\000\003\000\007\000' > corpus/coco_mask/counts_3x4
# json_lexer: a COCO file and a packed metadata section, as they are.
tail -c +2 corpus/coco_json/instances > corpus/json_lexer/instances   # without its mode byte
printf '{"format": "trdata.pack", "version": 2, "classes": ["cat", "caf\\u00e9", "\\udcff"], "extras": ["txt"], "options": {"short_side": null, "max_side": 512, "quality": 90, "source": "s", "identity": "i", "block_bytes": 4194304}, "writer": "trdata 0.1.0"}' > corpus/json_lexer/pack_meta
printf '[NaN, -Infinity, 1e400, -0, 0.1e-5, "\\ud800", {"": [[]]}]' > corpus/json_lexer/python_tokens
# tfrecord: the reference writer's Example (formats-research.md §5), framed (mode 1, one record) and raw (mode 0).
printf '\001\377\n8\n\032\n\rimage/encoded\022\t\n\a\n\005\377\330xyz\n\032\n\021image/class/label\022\005\032\003\n\001\a' > corpus/tfrecord/example
