#!/usr/bin/env bash
# Install a built wheel into a fresh venv per interpreter and run the test suite against it
# (not against the source tree: pytest runs from a scratch directory, so python/ is not importable).
# Used by `make test-wheel` and by .github/workflows/release.yml (inside manylinux containers).
#
# Usage: scripts/test-wheel.sh WHEEL|SDIST PYTHON...   e.g. scripts/test-wheel.sh dist-release/x.whl python3.9 python3.13
#        (an sdist is built by pip first: needs cmake, nasm, a C compiler and cargo)
# Env:   PYTEST_ARGS   default: -q -x -p no:cacheprovider  (-k "not cuda" is always added)
#        PIP_ARGS      extra pip install arguments (e.g. --only-binary=:all:)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(($# >= 2)) || { echo "usage: $0 WHEEL PYTHON..." >&2; exit 2; }
whl="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
read -r -a pytest_args <<< "${PYTEST_ARGS:--q -x -p no:cacheprovider}"
read -r -a pip_args <<< "${PIP_ARGS:-}"

status=0
for py in "$@"; do
    work="$(mktemp -d)"
    echo "=== $("$py" -c 'import sys, platform; print(platform.python_implementation(), sys.version.split()[0], platform.machine())') ($py): $(basename "$whl")"
    "$py" -m venv "$work/venv"
    "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "${pip_args[@]}" "${whl}[test]"
    # the tests and pytest's config (pyproject.toml: timeout, markers); nothing from python/
    cp -r "$ROOT/tests" "$ROOT/pyproject.toml" "$work/"
    (
        cd "$work"
        "$work/venv/bin/python" - <<'PY'
import trdata, trdata._core, sysconfig
assert trdata.__file__.startswith(sysconfig.get_paths()["purelib"]), trdata.__file__
print("trdata", trdata.__version__, "from", trdata._core.__file__)
PY
        "$work/venv/bin/trdata" info
        "$work/venv/bin/python" -m pytest "${pytest_args[@]}" -k "not cuda" tests
    ) || status=1
    rm -rf "$work"
done
exit $status
