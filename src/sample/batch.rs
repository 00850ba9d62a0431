//! sample/batch — a batch's targets as ragged columns: per field one flat array in row order, and per row the
//! counts that split it (instances `K`, keypoints `P`). The dense fields (instance masks, `K · H · W` bytes a row,
//! and label maps, `H · W`) stay the buffers the workers made, one per row, handed over without a copy (a batch of
//! COCO masks is tens of MB: concatenating it on the consumer's thread cost more than all the rest). Made once per
//! batch from the rows' [`RowTargets`] on the consumer's side with the GIL released; Python slices it into
//! per-image dicts (no per-row work beyond the views) or pads it without a loop.

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
    /// Instance masks: each row's `K·H·W` bytes.
    pub masks: Option<Vec<Vec<u8>>>,
    /// Label maps: each row's `H·W` bytes.
    pub label_map: Option<Vec<Vec<u8>>>,
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
    pub fn from_rows(kind: TargetKind, masks: bool, keypoints: bool, rows: Vec<RowTargets>) -> Result<Self, String> {
        let mut c = TargetColumns {
            keypoints: keypoints.then(Default::default),
            masks: masks.then(Vec::new),
            label_map: (kind == TargetKind::LabelMap).then(Vec::new),
            ..TargetColumns::default()
        };
        for (r, row) in rows.into_iter().enumerate() {
            c.image_id.push(row.image_id);
            c.orig_size.push([row.orig_size.0 as i64, row.orig_size.1 as i64]);
            c.size.push([row.size.0 as i64, row.size.1 as i64]);
            match (row.fields, kind) {
                (MovedFields::Instances { boxes, labels, iscrowd, keypoints, masks }, TargetKind::Instances) => {
                    c.counts.push(boxes.len() as i64);
                    c.boxes.extend_from_slice(&boxes);
                    c.labels.extend_from_slice(&labels);
                    c.iscrowd.extend_from_slice(&iscrowd);
                    match (&mut c.keypoints, keypoints) {
                        (Some((points, xyv)), Some((p, k))) => {
                            points.push(p as i64);
                            xyv.extend_from_slice(&k);
                        }
                        (None, None) => {}
                        _ => return Err(format!("row {r}: keypoints where the batch has none, or none where it has")),
                    }
                    match (&mut c.masks, masks) {
                        (Some(all), Some(m)) => all.push(m),
                        (None, None) => {}
                        _ => return Err(format!("row {r}: masks where the batch has none, or none where it has")),
                    }
                }
                (MovedFields::LabelMap(m), TargetKind::LabelMap) => {
                    c.label_map.get_or_insert_with(Vec::new).push(m);
                }
                _ => return Err(format!("row {r}: targets of another kind than the store's {kind:?}")),
            }
        }
        Ok(TargetBatch { kind, columns: c })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: usize, (h, w): (usize, usize), masks: bool) -> RowTargets {
        RowTargets {
            image_id: k as i64,
            orig_size: (2 * h, 2 * w),
            size: (h, w),
            fields: MovedFields::Instances {
                boxes: (0..k).map(|j| [j as f32, 0.0, j as f32 + 1.0, 1.0]).collect(),
                labels: (0..k as i64).collect(),
                iscrowd: vec![0; k],
                keypoints: None,
                masks: masks.then(|| (0..k * h * w).map(|v| (v % 2) as u8).collect()),
            },
        }
    }

    #[test]
    fn columns_concatenate_rows_in_order_with_their_counts() {
        let rows = vec![row(2, (3, 4), true), row(0, (5, 5), true), row(1, (2, 2), true)];
        let b = TargetBatch::from_rows(TargetKind::Instances, true, false, rows).unwrap();
        let c = &b.columns;
        assert_eq!(c.counts, [2, 0, 1]);
        assert_eq!(c.image_id, [2, 0, 1]);
        assert_eq!(c.size, [[3, 4], [5, 5], [2, 2]]);
        assert_eq!(c.orig_size[0], [6, 8]);
        assert_eq!(c.labels, [0, 1, 0]);
        assert_eq!(c.boxes[2], [0.0, 0.0, 1.0, 1.0]);
        assert_eq!(c.masks.as_ref().unwrap().iter().map(Vec::len).collect::<Vec<_>>(), [2 * 12, 0, 4]);
        assert!(c.keypoints.is_none() && c.label_map.is_none());
    }

    #[test]
    fn a_row_that_disagrees_with_the_store_is_refused() {
        // masks where the store has none, and none where it has
        assert!(TargetBatch::from_rows(TargetKind::Instances, false, false, vec![row(1, (2, 2), true)]).is_err());
        assert!(TargetBatch::from_rows(TargetKind::Instances, true, false, vec![row(1, (2, 2), false)]).is_err());
        // an instance row in a label-map batch
        assert!(TargetBatch::from_rows(TargetKind::LabelMap, false, false, vec![row(1, (2, 2), false)]).is_err());
        let map =
            RowTargets { image_id: 0, orig_size: (1, 1), size: (1, 2), fields: MovedFields::LabelMap(vec![3, 4]) };
        let b = TargetBatch::from_rows(TargetKind::LabelMap, false, false, vec![map]).unwrap();
        assert_eq!(b.columns.label_map, Some(vec![vec![3u8, 4]]));
    }
}
