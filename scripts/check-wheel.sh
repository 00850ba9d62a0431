#!/usr/bin/env bash
# Check built wheels: platform tags, the extension's dynamic dependencies and its newest glibc
# symbol version. Used by `make wheel-check` and by .github/workflows/release.yml.
#
# NEEDED must be a subset of: libc.so.6, libm.so.6, libgcc_s.so.1, the dynamic loader
# (ld-linux-x86-64.so.2 / ld-linux-aarch64.so.1), and libpthread.so.0, libdl.so.2, librt.so.1.
# The last three are glibc's own sonames: before glibc 2.34 pthread_*, dlopen and clock_* lived
# there, so a build against glibc 2.28 (manylinux_2_28) lists them; on 2.34+ they are empty stubs.
# Anything else (libhwloc, libudev, libturbojpeg, libcuda, libpython, libstdc++...) fails.
#
# Usage: scripts/check-wheel.sh [--max-glibc 2.28] WHEEL...
set -euo pipefail

max_glibc=""
if [[ "${1:-}" == "--max-glibc" ]]; then max_glibc="$2"; shift 2; fi
(($#)) || { echo "usage: $0 [--max-glibc X.Y] WHEEL..." >&2; exit 2; }
PY="${PYTHON:-python3}"
ALLOWED='^(libc\.so\.6|libm\.so\.6|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1)$'

status=0
for whl in "$@"; do
    tmp="$(mktemp -d)"
    "$PY" -m zipfile -e "$whl" "$tmp"
    so="$(find "$tmp" -name '_core*.so' | head -1)"
    [[ -n "$so" ]] || { echo "$whl: no _core*.so inside" >&2; status=1; rm -rf "$tmp"; continue; }
    echo "$(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)"
    echo "  tags: $(grep -h '^Tag:' "$tmp"/*.dist-info/WHEEL | cut -d' ' -f2 | tr '\n' ' ')"
    echo "  $(readelf -h "$so" | awk -F: '/Machine/ {gsub(/^ +/, "", $2); print "machine: " $2}')"
    needed="$(readelf -d "$so" | awk '/\(NEEDED\)/ {gsub(/[][]/, "", $5); print $5}')"
    echo "  NEEDED: $(echo "$needed" | tr "\n" " ")"
    for lib in $needed; do
        if ! [[ "$lib" =~ $ALLOWED ]]; then
            echo "  error: unexpected shared-library dependency $lib" >&2; status=1
        fi
    done
    # readelf reads any ELF architecture (objdump -T only the host's): the version needs list.
    glibc="$(readelf -W -V "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -1)"
    echo "  max GLIBC symbol version: ${glibc:-none}"
    if [[ -n "$max_glibc" && -n "$glibc" ]] \
        && [[ "$(printf '%s\n%s\n' "${glibc#GLIBC_}" "$max_glibc" | sort -V | tail -1)" != "$max_glibc" ]]; then
        echo "  error: needs $glibc, newer than the allowed GLIBC_$max_glibc" >&2; status=1
    fi
    rm -rf "$tmp"
done
exit $status
