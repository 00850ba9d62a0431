#!/usr/bin/env bash
# Build hwloc 2.9.0 as a static, position-independent library into .deps/hwloc (cached).
#
# Why not Debian's libhwloc-dev: its libhwloc.a is not PIC, so it cannot be linked into the
# Python extension (a shared object): "relocation R_X86_64_PC32 against symbol `stderr` ...
# recompile with -fPIC". Linking libhwloc.so.15 dynamically instead would make the wheel depend
# on a library that is not part of manylinux. So we build the same upstream release from the
# Debian *source* package (fetched with apt from a private deb-src list: no system file is
# changed) with --with-pic --enable-static --disable-shared, and point pkg-config at it;
# hwlocality-sys then links it statically (non-/usr prefix => pkg-config-rs emits static=hwloc).
#
# Kept: Linux sysfs PCI discovery ("PCI(linux) LinuxIO" in configure's summary), which is what
# gives a GPU's PCI locality. Do NOT add --disable-pci: that also removes the Linux sysfs PCI
# backend (0 PCI objects). Dropped: plugins, libudev, libxml2, cairo, CUDA/NVML/OpenCL/RSMI/
# LevelZero/GL backends, so the result needs only libc and libm.
#
# Usage: scripts/build-hwloc.sh [PREFIX]       (default: <repo>/.deps/hwloc)
# Env:   HWLOC_TARBALL=/path/hwloc-2.9.0.tar.bz2 uses a local tarball instead of apt.
#        CC=...              compiler (e.g. a `zig cc -target x86_64-linux-gnu.2.28` wrapper for a
#                            manylinux_2_28 wheel built on a newer glibc; see `make wheel-manylinux`)
#        HWLOC_HOST=aarch64-linux-gnu   configure --host when cross-compiling (with a matching CC)
# Without apt-get (e.g. in a manylinux container) the same Debian orig tarball is downloaded
# with curl from Debian's pool. Either way its SHA-256 is checked.
set -euo pipefail

HWLOC_VERSION=2.9.0
# = Debian's hwloc_2.9.0-1.dsc Checksums-Sha256 for hwloc_2.9.0.orig.tar.bz2
HWLOC_SHA256=b3fb1a43a14d8fbcd8e976de5ede2ea7ce1d768ed173adb33c7ceaaf098dc970
HWLOC_POOL_URL=https://deb.debian.org/debian/pool/main/h/hwloc/hwloc_${HWLOC_VERSION}.orig.tar.bz2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${1:-$ROOT/.deps/hwloc}"
STAMP="$PREFIX/.trdata-hwloc-$HWLOC_VERSION"
WORK="$ROOT/.deps/hwloc-build"

log() { printf '[build-hwloc] %s\n' "$*" >&2; }

# The stamp holds the prefix: hwloc.pc records absolute paths, so a moved checkout rebuilds.
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$PREFIX" && -f "$PREFIX/lib/libhwloc.a" \
      && -f "$PREFIX/lib/pkgconfig/hwloc.pc" ]]; then
    log "hwloc $HWLOC_VERSION already built in $PREFIX"
    exit 0
fi

mkdir -p "$WORK"
tarball="${HWLOC_TARBALL:-$WORK/hwloc_${HWLOC_VERSION}.orig.tar.bz2}"

if [[ ! -f "$tarball" ]] && ! command -v apt-get >/dev/null; then
    log "no apt-get: downloading $HWLOC_POOL_URL"
    curl -fsSL --retry 3 -o "$tarball.part" "$HWLOC_POOL_URL"
    mv "$tarball.part" "$tarball"
fi
if [[ ! -f "$tarball" ]]; then
    log "fetching the Debian source package of hwloc (bookworm) with a private deb-src list"
    apt_dir="$WORK/apt"
    mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    # Same mirror and keyring as the system's bookworm sources, but only deb-src, and in our
    # own state dirs so the system's package lists are untouched.
    cat > "$apt_dir/parts/debian-src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt_opts=(
        -o "Dir::Etc::SourceList=/dev/null"
        -o "Dir::Etc::SourceParts=$apt_dir/parts"
        -o "Dir::State::Lists=$apt_dir/lists"
        -o "Dir::Cache=$apt_dir/cache"
        -o "APT::Sandbox::User=root"
        -o "Debug::NoLocking=1"
    )
    apt-get "${apt_opts[@]}" -qq update
    # apt verifies the files against the signed Sources index before keeping them.
    # Bookworm's version (2.9.0-1 today); a stable point release would keep upstream 2.9.0.
    (cd "$WORK" && apt-get "${apt_opts[@]}" -qq source --download-only hwloc)
    if [[ ! -f "$tarball" ]]; then
        log "apt did not produce $tarball (found: $(ls "$WORK" | tr '\n' ' '))"; exit 1
    fi
fi

echo "$HWLOC_SHA256  $tarball" | sha256sum -c --quiet - \
    || { log "$tarball: SHA-256 mismatch (expected $HWLOC_SHA256)"; exit 1; }

log "configuring hwloc $HWLOC_VERSION (static, PIC${CC:+, CC=$CC}${HWLOC_HOST:+, host $HWLOC_HOST})"
src="$WORK/src"
rm -rf "$src"
mkdir -p "$src"
tar -xjf "$tarball" -C "$src" --strip-components=1
cd "$src"
./configure --prefix="$PREFIX" ${HWLOC_HOST:+--host="$HWLOC_HOST"} \
    --enable-static --disable-shared --with-pic \
    --disable-plugins --disable-libudev --disable-libxml2 --disable-cairo \
    --disable-opencl --disable-cuda --disable-nvml --disable-rsmi --disable-levelzero \
    --disable-gl --disable-doxygen \
    > "$WORK/configure.log" 2>&1 || { tail -40 "$WORK/configure.log"; exit 1; }
grep -q 'PCI(linux)' "$WORK/configure.log" \
    || { log "configure did not enable Linux PCI discovery (see $WORK/configure.log)"; exit 1; }

log "building hwloc (log: $WORK/make.log)"
jobs="$(nproc 2>/dev/null || echo 2)"
# Only the library and hwloc.pc are needed: skip utils/ (lstopo etc.), doc/, tests/.
{ make -j"$jobs" -C include && make -j"$jobs" -C hwloc \
    && make -C include install && make -C hwloc install \
    && install -D -m 644 hwloc.pc "$PREFIX/lib/pkgconfig/hwloc.pc"; } \
    > "$WORK/make.log" 2>&1 || { tail -40 "$WORK/make.log"; exit 1; }

# The static archive must be position independent, or the link into the extension fails later
# with a far less obvious message.
if readelf -r "$PREFIX/lib/libhwloc.a" 2>/dev/null | grep -q 'R_X86_64_32S\|R_X86_64_PC32.*stderr'; then
    log "warning: $PREFIX/lib/libhwloc.a contains non-PIC relocations"
fi
echo "$PREFIX" > "$STAMP"
rm -rf "$src"
log "hwloc $HWLOC_VERSION installed in $PREFIX"
