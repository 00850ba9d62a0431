//! Decoder tests on the real files of ../shared/data/edge-cases.
