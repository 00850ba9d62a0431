//! Philox4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//!
//! There is no global RNG in trdata. Every random decision is `philox(counter, key)` with
//! key = seed and counter = (block, op, sample index, epoch), so a sample's augmentation depends only on
//! (seed, epoch, sample index, op) — never on which worker, how many threads or which GPU processed it.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Op index of the epoch-order shuffle (plan), kept apart from per-sample augmentation ops.
pub const OP_PLAN_SHUFFLE: u32 = 0x504C_414E;
/// Op index of the block permutation of a block-structured plan (partial packed files).
pub const OP_PLAN_BLOCKS: u32 = 0x424C_4B53;
/// Op index of the shuffle inside one window of blocks (the window number is the stream's sample index).
pub const OP_PLAN_WINDOW: u32 = 0x5749_4E44;
/// Op index of the replacement choice of the `skip` error policy.
pub const OP_SKIP_REPLACEMENT: u32 = 0x534B_4950;
/// Op index of RandomResizedCrop's parameter draws.
pub const OP_RANDOM_RESIZED_CROP: u32 = 1;
/// Op index of RandomHorizontalFlip's coin.
pub const OP_HORIZONTAL_FLIP: u32 = 2;
/// Op index of the compiled program's op at list position `pos` is `OP_BASE + pos` (augment/program.rs): each op
/// draws from its own stream, a function of (seed, epoch, sample index, op position) only. Far from the fixed
/// indices above, so a list position can never alias them.
pub const OP_BASE: u32 = 0x100;

#[inline]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// One Philox4x32 block with 10 rounds.
#[inline]
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            key[0] = key[0].wrapping_add(W0);
            key[1] = key[1].wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo(M0, ctr[0]);
        let (hi1, lo1) = mulhilo(M1, ctr[2]);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
    }
    ctr
}

/// A stream of random numbers for one (seed, epoch, sample, op). Cheap to create; not shared.
#[derive(Debug, Clone)]
pub struct SampleRng {
    key: [u32; 2],
    ctr: [u32; 4],
    buf: [u32; 4],
    used: usize,
}

impl SampleRng {
    /// The stream of `op` for sample `index` in `epoch` under `seed`.
    pub fn new(seed: u64, epoch: u64, index: u64, op: u32) -> Self {
        let key = [seed as u32, (seed >> 32) as u32];
        // Counter words: [block, op, index, epoch ^ index_hi] — the high index bits are folded into the
        // epoch word so datasets above 2^32 samples still get distinct streams.
        let ctr = [0, op, index as u32, (epoch as u32) ^ ((index >> 32) as u32).rotate_left(16)];
        Self { key, ctr, buf: [0; 4], used: 4 }
    }

    /// Next 32 random bits.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        if self.used == 4 {
            self.buf = philox4x32_10(self.ctr, self.key);
            self.ctr[0] = self.ctr[0].wrapping_add(1);
            self.used = 0;
        }
        let v = self.buf[self.used];
        self.used += 1;
        v
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        (u64::from(self.next_u32()) << 32) | u64::from(self.next_u32())
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    #[inline]
    pub fn uniform_range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// A standard normal variate (Box–Muller on two uniforms; the sine half is dropped so that every call costs
    /// the same two draws and the stream position does not depend on call parity).
    #[inline]
    pub fn normal_f32(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform(); // (0, 1]: ln(0) would be -inf
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// Uniform integer in [0, bound) without modulo bias (Lemire's multiply-shift with rejection).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0)");
        loop {
            let x = self.next_u64();
            let m = u128::from(x) * u128::from(bound);
            let low = m as u64;
            if low >= bound.wrapping_neg() % bound {
                return (m >> 64) as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32_10).
    #[test]
    fn known_answers() {
        assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        assert_eq!(philox4x32_10([u32::MAX; 4], [u32::MAX; 2]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        assert_eq!(
            philox4x32_10([0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344], [0xa409_3822, 0x299f_31d0]),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn streams_differ_by_every_key_part() {
        let base: Vec<u32> = (0..8)
            .map({
                let mut r = SampleRng::new(1, 2, 3, 4);
                move |_| r.next_u32()
            })
            .collect();
        for (s, e, i, o) in [(9, 2, 3, 4), (1, 9, 3, 4), (1, 2, 9, 4), (1, 2, 3, 9), (1, 2, 3 + (1 << 32), 4)] {
            let mut r = SampleRng::new(s, e, i, o);
            let other: Vec<u32> = (0..8).map(|_| r.next_u32()).collect();
            assert_ne!(base, other, "stream ({s},{e},{i},{o}) equals the base stream");
        }
    }

    #[test]
    fn below_is_in_range_and_covers() {
        let mut r = SampleRng::new(7, 0, 0, 0);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            let v = r.below(7) as usize;
            seen[v] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800 && c < 1200), "{seen:?}");
    }
}
