//! Exact mid-epoch resume (docs/design/protocols.md "Resume"): what a loader must remember at a batch boundary to continue an epoch
//! in a new process, and how the continuation is produced.
//!
//! Protocol. A checkpoint taken after an engine delivered k batches of epoch e holds (e, k) plus, in fast
//! mode, the set D of that engine's sequence numbers already delivered:
//! - reproducible mode: slot = sequence number, so D = [0, k·B) and (e, k) is enough. The resumed job skips
//!   seq < k·B, the station's ring starts at batch k, and every later batch is byte-identical to the
//!   uninterrupted run's (same plan, same slots, same per-sample randomness).
//! - fast mode: real rows take ticket slots in completion order, so batch k−1 may hold any real seqs. The
//!   worker records, per ticket slot, the seq it wrote there (`EngineJob::slot_seqs`, one relaxed store
//!   before the row's `Station::complete`; the consumer read it after `take`, a mutex acquire, so it is
//!   visible). Chosen over a third i64 column in the slab: no layout change for the H2D path and no per
//!   batch work at all — the table is only read when `state_dict` is asked. D = (D of the previous resume,
//!   if any) ∪ {slot_seqs[s] : s ∈ [min(k₀·B, R), min(k·B, R))} ∪ [R, k·B) (filler/pad rows keep their
//!   fixed slots). On resume workers skip seqs in D, real tickets start at min(k·B, R) and the ring at
//!   batch k: the R − min(k·B, R) remaining real seqs fill exactly the remaining real slots, so no sample
//!   is lost or repeated.
//!
//! D travels as a bitmap over the engine's T sequence numbers (bit s = byte s/8, bit s mod 8, LSB first):
//! T/8 bytes, e.g. 20 KB for ImageNet on 8 engines.

use crate::error::{Result, TrdataError};

/// A set of an engine's sequence numbers in [0, len), as a bitmap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqBitmap {
    bits: Vec<u8>,
    len: u64,
}

impl SeqBitmap {
    /// The empty set over [0, len).
    pub fn new(len: u64) -> Self {
        Self { bits: vec![0; len.div_ceil(8) as usize], len }
    }

    /// Rebuild from `to_bytes` output; the byte count must match `len`, and no bit beyond it may be set.
    pub fn from_bytes(bytes: Vec<u8>, len: u64) -> Result<Self> {
        if bytes.len() as u64 != len.div_ceil(8) {
            return Err(TrdataError::config(
                "delivered",
                format!("bitmap of {} bytes does not cover {len} sequence numbers", bytes.len()),
            ));
        }
        if !len.is_multiple_of(8) && bytes.last().is_some_and(|b| b >> (len % 8) != 0) {
            return Err(TrdataError::config("delivered", "bitmap has bits beyond the epoch's sequence numbers"));
        }
        Ok(Self { bits: bytes, len })
    }

    /// The bitmap bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.bits.clone()
    }

    /// Number of sequence numbers covered.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the bitmap covers no sequence number.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Is `seq` in the set?
    pub fn contains(&self, seq: u64) -> bool {
        seq < self.len && self.bits[(seq / 8) as usize] & (1 << (seq % 8)) != 0
    }

    /// Add `seq` (< len).
    pub fn insert(&mut self, seq: u64) {
        assert!(seq < self.len, "sequence number {seq} outside the bitmap of {}", self.len);
        self.bits[(seq / 8) as usize] |= 1 << (seq % 8);
    }

    /// Number of members.
    pub fn count(&self) -> u64 {
        self.bits.iter().map(|b| u64::from(b.count_ones())).sum()
    }
}

/// Where an interrupted epoch continues: the epoch, the batches already delivered and, in fast mode, the
/// delivered sequence numbers of each local engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePoint {
    /// Epoch to continue.
    pub epoch: u64,
    /// Batches (steps) already delivered; the next one produced is this.
    pub first_batch: u64,
    /// Fast mode with first_batch > 0: per local engine, the delivered set D. Empty otherwise.
    pub delivered: Vec<SeqBitmap>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_round_trip_and_validation() {
        let mut m = SeqBitmap::new(13);
        for s in [0, 5, 12] {
            m.insert(s);
        }
        assert_eq!(m.count(), 3);
        let back = SeqBitmap::from_bytes(m.to_bytes(), 13).unwrap();
        assert!(back.contains(12) && back.contains(5) && !back.contains(4) && !back.contains(13));
        assert!(SeqBitmap::from_bytes(vec![0; 3], 13).is_err());
        assert!(SeqBitmap::from_bytes(vec![0, 0xff], 13).is_err());
    }
}
