//! param — how a user parameter's rule is written once: an integer range ([`IntParam`]) or a choice of
//! strings ([`Choice`]), each with the parameter's name and the one error wording
//! (`invalid <name>: <value> must …`). The tables themselves live next to what they configure (config.rs for
//! the Loader, augment/ for transforms and output spellings, decode/ for limits); the binding translates
//! Python values through them.

use crate::error::{Result, TrdataError};

/// An integer parameter: its name and accepted range, written once. [`IntParam::check`] is the one range
/// check every layer uses (the binding passes the user's int of any size, `LoaderConfig::validate` its
/// fields), worded `invalid <name>: <value> must be in <min>..=<max>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntParam {
    /// The parameter's name as the user writes it.
    pub name: &'static str,
    /// Smallest accepted value.
    pub min: i128,
    /// Largest accepted value.
    pub max: i128,
    /// Why the range is what it is, appended to the message ("" when obvious).
    pub why: &'static str,
}

impl IntParam {
    /// `name` accepting `min..=max`.
    pub const fn new(name: &'static str, min: i128, max: i128) -> Self {
        Self { name, min, max, why: "" }
    }

    /// The same, with the reason for the range (e.g. `" (double buffering needs ≥ 2)"`).
    pub const fn because(self, why: &'static str) -> Self {
        Self { why, ..self }
    }

    /// `value` as a `T` when it is in range, else this parameter's error.
    pub fn check<T: TryFrom<i128>>(&self, value: i128) -> Result<T> {
        self.check_shown(Some(value), &value.to_string())
    }

    /// Like [`check`](Self::check), for a value as the user wrote it: `value` is None when it does not even fit
    /// in 128 bits (a Python int of any size), `shown` is how the message shows it.
    pub fn check_shown<T: TryFrom<i128>>(&self, value: Option<i128>, shown: &str) -> Result<T> {
        match value {
            Some(v) if (self.min..=self.max).contains(&v) => T::try_from(v).map_err(|_| self.error(shown)),
            _ => Err(self.error(shown)),
        }
    }

    /// This parameter's out-of-range error for a value shown as `shown`.
    pub fn error(&self, shown: &str) -> TrdataError {
        self.error_in(shown, "")
    }

    /// The same, saying where the value sits (`"CenterCrop at transforms[1]"`; "" for nowhere in particular).
    pub fn error_in(&self, shown: &str, whence: &str) -> TrdataError {
        let whence = if whence.is_empty() { String::new() } else { format!(" ({whence})") };
        TrdataError::config(
            self.name,
            format!("{shown} must be in {}..={}{}{whence}", bound(self.min), bound(self.max), self.why),
        )
    }
}

/// A range bound as messages show it: digits, or `2**k - 1` for the large type limits (2**64 - 1, not
/// 18446744073709551615).
pub fn bound(b: i128) -> String {
    match b.checked_add(1) {
        Some(p) if b >= 1 << 31 && p.count_ones() == 1 => format!("2**{} - 1", p.trailing_zeros()),
        _ => b.to_string(),
    }
}

/// The accepted strings of a choice parameter, in documented order, with its name: `parse` and `name`
/// translate through them; the binding exports them to Python as `_core.CHOICES`.
#[derive(Debug)]
pub struct Choice<T: 'static> {
    /// The parameter's name as the user writes it.
    pub name: &'static str,
    /// (accepted string, value) pairs.
    pub values: &'static [(&'static str, T)],
}

impl<T: Copy + PartialEq> Choice<T> {
    /// `'a', 'b', 'c'`: the accepted strings, for messages.
    pub fn list(&self) -> String {
        self.values.iter().map(|(n, _)| format!("'{n}'")).collect::<Vec<_>>().join(", ")
    }

    /// The error for a value (shown as `shown`, e.g. a Python repr) that is not one of the strings.
    pub fn error(&self, shown: &str) -> TrdataError {
        TrdataError::config(self.name, format!("{shown} must be one of {}", self.list()))
    }

    /// Parse `s` (exact match), naming the parameter otherwise.
    pub fn parse(&self, s: &str) -> Result<T> {
        self.values.iter().find(|(n, _)| *n == s).map(|(_, v)| *v).ok_or_else(|| self.error(&format!("{s:?}")))
    }

    /// The accepted string of `value`.
    pub fn name_of(&self, value: T) -> &'static str {
        self.values.iter().find(|(_, v)| *v == value).map_or("?", |(n, _)| n)
    }

    /// The accepted strings, in documented order.
    pub fn names(&self) -> Vec<&'static str> {
        self.values.iter().map(|(n, _)| *n).collect()
    }
}
