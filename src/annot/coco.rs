//! annot/coco — COCO annotation files (module docs to come).
