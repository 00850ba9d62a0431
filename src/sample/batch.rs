//! sample/batch — a batch's targets as ragged columns: per field one flat array in row order, and per row the
//! counts that split it (instances `K`, keypoints `P`; masks and label maps split by `K · H · W` and `H · W` from
//! `size`). Made once per batch from the rows' [`RowTargets`] on the consumer's side with the GIL released;
//! Python slices it into per-image dicts (no per-row work beyond the views) or pads it without a loop.

use super::{MovedFields, RowTargets, TargetKind};

/// A batch's targets, ragged (module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetColumns {
    /// Each row's image id.
    pub image_id: Vec<i64>,
    /// Each row's source (height, width).
    pub orig_size: Vec<[i64; 2]>,
    /// Each row's canvas (height, width).
    pub size: Vec<[i64; 2]>,
    /// Instances: each row's `K`.
    pub counts: Vec<i64>,
    /// `ΣK × 4` boxes.
    pub boxes: Vec<[f32; 4]>,
    /// `ΣK` labels.
    pub labels: Vec<i64>,
    /// `ΣK` iscrowd.
    pub iscrowd: Vec<i64>,
    /// Keypoints: each row's `P`, and the `Σ K·P` triples.
    pub keypoints: Option<(Vec<i64>, Vec<[f32; 3]>)>,
    /// Instance masks: `Σ K·H·W` bytes.
    pub masks: Option<Vec<u8>>,
    /// Label maps: `Σ H·W` bytes.
    pub label_map: Option<Vec<u8>>,
}

/// A batch's targets: the kind and the columns.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetBatch {
    /// What the rows hold.
    pub kind: TargetKind,
    /// The columns.
    pub columns: TargetColumns,
}

impl TargetBatch {
    /// The columns of `rows` (in row order), all of `kind`, the optional fields present when the store has them
    /// (`masks`, `keypoints`). A row of another kind → a message (a store holds one kind).
    pub fn from_rows(kind: TargetKind, masks: bool, keypoints: bool, rows: &[RowTargets]) -> Result<Self, String> {
        let mut c = TargetColumns {
            keypoints: keypoints.then(Default::default),
            masks: masks.then(Vec::new),
            label_map: (kind == TargetKind::LabelMap).then(Vec::new),
            ..TargetColumns::default()
        };
        for (r, row) in rows.iter().enumerate() {
            c.image_id.push(row.image_id);
            c.orig_size.push([row.orig_size.0 as i64, row.orig_size.1 as i64]);
            c.size.push([row.size.0 as i64, row.size.1 as i64]);
            match (&row.fields, kind) {
                (MovedFields::Instances { boxes, labels, iscrowd, keypoints, masks }, TargetKind::Instances) => {
                    c.counts.push(boxes.len() as i64);
                    c.boxes.extend_from_slice(boxes);
                    c.labels.extend_from_slice(labels);
                    c.iscrowd.extend_from_slice(iscrowd);
                    match (&mut c.keypoints, keypoints) {
                        (Some((points, xyv)), Some((p, k))) => {
                            points.push(*p as i64);
                            xyv.extend_from_slice(k);
                        }
                        (None, None) => {}
                        _ => return Err(format!("row {r}: keypoints where the batch has none, or none where it has")),
                    }
                    match (&mut c.masks, masks) {
                        (Some(all), Some(m)) => all.extend_from_slice(m),
                        (None, None) => {}
                        _ => return Err(format!("row {r}: masks where the batch has none, or none where it has")),
                    }
                }
                (MovedFields::LabelMap(m), TargetKind::LabelMap) => {
                    c.label_map.get_or_insert_with(Vec::new).extend_from_slice(m);
                }
                _ => return Err(format!("row {r}: targets of another kind than the store's {kind:?}")),
            }
        }
        Ok(TargetBatch { kind, columns: c })
    }
}
