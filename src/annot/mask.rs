//! annot/mask — COCO segmentations to masks (module docs to come).
