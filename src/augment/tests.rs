//! augment tests
