#!/usr/bin/env bash
# Run a command with a PATH from which some tools are hidden: a temp dir of symlinks to every
# executable on the current PATH except the named ones. Shows what a build does on a machine
# without them (release.yml and the README use it to check the "nasm missing" message).
#
# Usage: scripts/path-without.sh TOOL... -- COMMAND [ARG...]
#        e.g. scripts/path-without.sh nasm yasm -- pip install dist-release/trdata-0.1.0.tar.gz
set -euo pipefail
hide=()
while (($#)) && [[ "$1" != "--" ]]; do hide+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
(($#)) || { echo "usage: $0 TOOL... -- COMMAND [ARG...]" >&2; exit 2; }

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
IFS=: read -r -a dirs <<< "$PATH"
for d in "${dirs[@]}"; do
    [[ -d "$d" ]] || continue
    for f in "$d"/*; do
        name="${f##*/}"
        [[ -x "$f" && ! -e "$bin/$name" ]] || continue
        for h in "${hide[@]}"; do [[ "$name" == "$h" ]] && continue 2; done
        ln -s "$f" "$bin/$name"
    done
done
PATH="$bin" "$@"
