//! Loader configuration as validated data. Python (src/py) parses user values into these types; the
//! constructors here check ranges and name the offending parameter in the error.

use crate::augment::{DType, Layout, SamplePipeline};
use crate::decode::DecodeLimits;
use crate::error::{Result, TrdataError};
use crate::plan::LastBatch;
use crate::topology::PinMode;
use crate::worker::ErrorPolicy;

/// The one list of accepted strings per choice parameter, in documented order. `parse_choice` and
/// `choice_name` translate through them; the binding exports them to Python as `_core.CHOICES`.
pub type Choices<T> = &'static [(&'static str, T)];

/// `last_batch` values.
pub const LAST_BATCH: Choices<LastBatch> =
    &[("partial", LastBatch::Partial), ("drop", LastBatch::Drop), ("pad", LastBatch::Pad)];
/// `on_error` values.
pub const ON_ERROR: Choices<ErrorPolicy> = &[("raise", ErrorPolicy::Raise), ("skip", ErrorPolicy::Skip)];
/// `pin` values.
pub const PIN: Choices<PinMode> =
    &[("round-robin", PinMode::RoundRobin), ("numa", PinMode::Numa), ("none", PinMode::None)];
/// `dtype` values (output element type).
pub const DTYPE: Choices<DType> =
    &[("float32", DType::F32), ("float16", DType::F16), ("bfloat16", DType::BF16), ("uint8", DType::U8)];
/// `layout` values.
pub const LAYOUT: Choices<Layout> = &[("NCHW", Layout::Nchw), ("NHWC", Layout::Nhwc)];

/// `'a', 'b', 'c'`: the accepted strings of a choice, for messages.
pub fn choice_list<T>(choices: Choices<T>) -> String {
    choices.iter().map(|(n, _)| format!("'{n}'")).collect::<Vec<_>>().join(", ")
}

/// The error for a value (shown as `shown`, e.g. a Python repr) that is not one of `choices`.
pub fn choice_error<T>(parameter: &str, choices: Choices<T>, shown: &str) -> TrdataError {
    TrdataError::config(parameter, format!("{shown} is not one of {}", choice_list(choices)))
}

/// Parse `s` as one of `choices` (exact match), naming `parameter` otherwise.
pub fn parse_choice<T: Copy>(parameter: &str, choices: Choices<T>, s: &str) -> Result<T> {
    choices
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, v)| *v)
        .ok_or_else(|| choice_error(parameter, choices, &format!("{s:?}")))
}

/// The accepted string of `value` in `choices`.
pub fn choice_name<T: PartialEq>(choices: Choices<T>, value: T) -> &'static str {
    choices.iter().find(|(_, v)| *v == value).map_or("?", |(n, _)| n)
}

impl LastBatch {
    /// Parse `drop` / `pad` / `partial`.
    pub fn parse(s: &str) -> Result<Self> {
        parse_choice("last_batch", LAST_BATCH, s)
    }

    /// The accepted string of this value.
    pub fn name(self) -> &'static str {
        choice_name(LAST_BATCH, self)
    }
}

impl ErrorPolicy {
    /// Parse `raise` / `skip`.
    pub fn parse(s: &str) -> Result<Self> {
        parse_choice("on_error", ON_ERROR, s)
    }
}

impl PinMode {
    /// Parse `none` / `round-robin` / `numa`.
    pub fn parse(s: &str) -> Result<Self> {
        parse_choice("pin", PIN, s)
    }
}

/// Largest `max_held_batches` (each held batch may keep one batch buffer allocated).
pub const MAX_HELD_BATCHES: usize = 65_536;

/// CPU ids must be below this (glibc's CPU_SETSIZE) to be pinnable.
pub const MAX_CPU_ID: usize = 1024;

/// `device_slots`: device batch slots per GPU (each holds one batch in device memory).
pub const DEVICE_SLOTS: std::ops::RangeInclusive<usize> = 2..=64;

/// Check `device_slots` (any loader, CPU or CUDA: a value is valid or not whatever the device) and return it
/// as a count; names `device_slots` otherwise. The one place its range is written.
pub fn check_device_slots(n: i64) -> Result<usize> {
    match usize::try_from(n) {
        Ok(v) if DEVICE_SLOTS.contains(&v) => Ok(v),
        _ => Err(TrdataError::config(
            "device_slots",
            format!("{n} must be in {}..={} (double buffering needs ≥ 2)", DEVICE_SLOTS.start(), DEVICE_SLOTS.end()),
        )),
    }
}

/// Everything a loader needs besides its dataset.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Rows per batch.
    pub batch_size: usize,
    /// Worker threads.
    pub workers: usize,
    /// Shuffle the epoch order.
    pub shuffle: bool,
    /// Seed of every random decision.
    pub seed: u64,
    /// Byte-identical batches (fixed slots) instead of first-finished-first-placed slots.
    pub reproducible: bool,
    /// Last-batch policy.
    pub last_batch: LastBatch,
    /// This process's rank and the number of ranks.
    pub rank: usize,
    /// Number of ranks (processes) sharing the epoch.
    pub world_size: usize,
    /// CPU binding of workers.
    pub pin: PinMode,
    /// CPUs the `round-robin` binding cycles over (None = every CPU this process may run on). Set to this
    /// process's share of the node's cores when several ranks share a node, so they never pin to the same
    /// cores.
    pub cpus: Option<Vec<usize>>,
    /// Bad-sample policy.
    pub on_error: ErrorPolicy,
    /// Batches the station fills ahead of the consumer (ring depth K ≥ 2).
    pub prefetch: usize,
    /// Batches Python may hold at once beyond the ring before the producer blocks.
    pub max_held_batches: usize,
    /// Per-sample decode + augmentation.
    pub pipeline: SamplePipeline,
    /// Decode-bomb budgets of every worker's decoder (pixels, progressive scans, memory, retained scratch).
    pub decode_limits: DecodeLimits,
}

impl LoaderConfig {
    /// The default of `reproducible` when the user gives none: fixed slots (dataset order) for an unshuffled
    /// loader — eval code writes predictions by position, as with torch's DataLoader — and first-finished slots
    /// for a shuffled one, whose order is random anyway (`benches/order_cost.py` measures what order costs).
    pub fn default_reproducible(shuffle: bool) -> bool {
        !shuffle
    }

    /// Check ranges; names the parameter at fault.
    pub fn validate(&self) -> Result<()> {
        self.decode_limits.validate()?;
        if self.batch_size == 0 {
            return Err(TrdataError::config("batch_size", "must be ≥ 1"));
        }
        if self.batch_size > 1 << 20 {
            return Err(TrdataError::config(
                "batch_size",
                format!("{} is absurdly large (limit 1048576)", self.batch_size),
            ));
        }
        if self.workers == 0 || self.workers > 1024 {
            return Err(TrdataError::config("workers", format!("{} must be in 1..=1024", self.workers)));
        }
        if self.world_size == 0 {
            return Err(TrdataError::config("world_size", "must be ≥ 1"));
        }
        if self.rank >= self.world_size {
            return Err(TrdataError::config(
                "rank",
                format!("{} must be < world_size ({})", self.rank, self.world_size),
            ));
        }
        if let Some(cpus) = &self.cpus {
            if cpus.is_empty() {
                return Err(TrdataError::config("cpus", "the CPU list is empty"));
            }
            // CPU sets hold ids below CPU_SETSIZE (1024); a larger id would index past the set inside libc.
            if let Some(bad) = cpus.iter().find(|&&c| c >= MAX_CPU_ID) {
                return Err(TrdataError::config("cpus", format!("CPU id {bad} is not below {MAX_CPU_ID}")));
            }
        }
        if self.max_held_batches > MAX_HELD_BATCHES {
            return Err(TrdataError::config(
                "max_held_batches",
                format!("{} must be in 0..={MAX_HELD_BATCHES}", self.max_held_batches),
            ));
        }
        if self.prefetch < 2 || self.prefetch > 64 {
            return Err(TrdataError::config(
                "prefetch",
                format!("{} must be in 2..=64 (double buffering needs ≥ 2)", self.prefetch),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_round_trips_and_only_exact_strings_parse() {
        for (name, v) in LAST_BATCH {
            assert_eq!(LastBatch::parse(name).unwrap(), *v);
            assert_eq!(v.name(), *name);
        }
        for (name, v) in DTYPE {
            assert_eq!(parse_choice("dtype", DTYPE, name).unwrap(), *v);
            assert_eq!(choice_name(DTYPE, *v), *name);
        }
        assert_eq!(PinMode::parse("numa").unwrap(), PinMode::Numa);
        assert_eq!(ErrorPolicy::parse("skip").unwrap(), ErrorPolicy::Skip);
        for bad in ["Drop", "drop ", "", "DROP"] {
            let e = LastBatch::parse(bad).unwrap_err().to_string();
            assert_eq!(e, format!("invalid last_batch: {bad:?} is not one of 'partial', 'drop', 'pad'"));
        }
        let e = parse_choice("layout", LAYOUT, "nchw").unwrap_err().to_string();
        assert_eq!(e, "invalid layout: \"nchw\" is not one of 'NCHW', 'NHWC'");
    }

    #[test]
    fn device_slots_range_is_checked_once_for_every_value() {
        for ok in [2, 3, 64] {
            assert_eq!(check_device_slots(ok).unwrap(), ok as usize);
        }
        for bad in [i64::MIN, -1, 0, 1, 65, 1_000_000_000, i64::MAX] {
            let e = check_device_slots(bad).unwrap_err().to_string();
            assert_eq!(e, format!("invalid device_slots: {bad} must be in 2..=64 (double buffering needs ≥ 2)"));
        }
    }
}
