"""PEP 517 build backend of trdata: maturin's, after a check for the native tools a source build needs.

``pip install trdata-*.tar.gz`` (or ``pip install .``) compiles libjpeg-turbo, which turbojpeg-sys
builds with **cmake**, and on x86 its SIMD code with **nasm** (trdata requires the SIMD build). Without
them the build fails deep inside cargo's output with an error that does not say what to install. This
module stops first, naming the missing tool and how to install it. The check cannot live in build.rs:
cargo runs turbojpeg-sys's build script (which runs cmake) before trdata's own.

Everything else is maturin's backend unchanged. hwloc is not needed: the default build takes the CPU/NUMA
topology from sysfs (the ``hwloc`` cargo feature is opt-in, used for the release wheels).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys

import maturin
from maturin import *  # noqa: F403  (build_sdist, prepare_metadata_for_build_wheel, ...)

_X86 = {"x86_64", "amd64", "i386", "i486", "i586", "i686", "x86"}


def missing_tools() -> list[str]:
    """The tools the source build needs that are not on PATH."""
    if os.environ.get("TURBOJPEG_SOURCE", "vendor") != "vendor":
        return []  # a prebuilt libjpeg-turbo 3 (TURBOJPEG_SOURCE=pkg-config|explicit): no cmake build
    missing = []
    if shutil.which(os.environ.get("CMAKE", "cmake")) is None:
        missing.append("cmake")
    # libjpeg-turbo's CMake accepts nasm or yasm for the x86 SIMD code; Arm SIMD is plain C.
    if platform.machine().lower() in _X86 and not (shutil.which("nasm") or shutil.which("yasm")):
        missing.append("nasm")
    return missing


def check_tools() -> None:
    missing = missing_tools()
    if not missing:
        return
    tools = " and ".join(missing)
    sys.stderr.write(
        f"\nerror: building trdata from source needs {tools}, not found on PATH.\n"
        "  libjpeg-turbo (trdata's JPEG decoder) is compiled with cmake, and its x86 SIMD code with nasm.\n"
        "  Install them and retry:\n"
        "    Debian/Ubuntu:  sudo apt-get install cmake nasm\n"
        "    Fedora/RHEL:    sudo dnf install cmake nasm\n"
        "    macOS:          brew install cmake nasm\n"
        "  (with a C compiler; the prebuilt x86_64/aarch64 Linux wheels need none of this)\n\n"
    )
    raise SystemExit(1)


def get_requires_for_build_wheel(config_settings=None):
    check_tools()
    return maturin.get_requires_for_build_wheel(config_settings)


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    check_tools()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    check_tools()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
