//! Build facts the binary reports about itself (`_core.machine_info()`, `trdata info`).
//!
//! libjpeg-turbo has no API that says whether its SIMD code was compiled in, so we read the
//! `jconfig.h` that turbojpeg-sys installed (its include dir arrives as `DEP_TURBOJPEG_INCLUDE`
//! because turbojpeg-sys declares `links = "turbojpeg"`): `#define WITH_SIMD 1` is written by
//! libjpeg-turbo's CMake exactly when the NASM-built SIMD extensions are part of the library.
//! With the `require-simd` feature (Cargo.toml) a build without NASM fails instead of silently
//! producing the slow library, so in practice this reads "1".
//!
//! This script never fails the build: unknown facts become "unknown".

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TURBOJPEG_INCLUDE");
    println!("cargo:rerun-if-env-changed=TURBOJPEG_SOURCE");

    let mut simd = "unknown".to_owned();
    let mut version = "unknown".to_owned();
    let includes = env::var("DEP_TURBOJPEG_INCLUDE").unwrap_or_default();
    for dir in includes.split(',').filter(|d| !d.is_empty()) {
        let path = PathBuf::from(dir).join("jconfig.h");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        println!("cargo:rerun-if-changed={}", path.display());
        simd = "0".to_owned();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["#define", "WITH_SIMD", "1", ..] => simd = "1".to_owned(),
                ["#define", "LIBJPEG_TURBO_VERSION", v, ..] => version = (*v).to_owned(),
                _ => {}
            }
        }
        break;
    }
    // How the library was obtained: vendored sources built by cmake (the default with the crate's
    // `cmake` feature) unless TURBOJPEG_SOURCE says otherwise.
    let source = env::var("TURBOJPEG_SOURCE").unwrap_or_else(|_| "vendor".to_owned());

    println!("cargo:rustc-env=TRDATA_JPEG_SIMD_BUILT={simd}");
    println!("cargo:rustc-env=TRDATA_JPEG_VERSION={version}");
    println!("cargo:rustc-env=TRDATA_JPEG_SOURCE={source}");
    println!("cargo:rustc-env=TRDATA_BUILD_PROFILE={}", env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned()));
    println!("cargo:rustc-env=TRDATA_BUILD_TARGET={}", env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned()));
}
