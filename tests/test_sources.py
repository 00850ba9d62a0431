"""Where the bytes come from: non-regular files, symlink loops, non-UTF-8 names, torchvision's ImageFolder rules
and FileList validation. Every fixture is made here (real files, FIFOs and symlinks in tmp_path); anything that
could hang or exhaust memory on a regression runs in a subprocess with a timeout and an address-space limit."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import trdata
from PIL import Image

# torchvision.datasets.folder (0.2x), copied rule by rule: torchvision is not installed here.
TV_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def tv_find_classes(directory: str) -> tuple[list[str], dict[str, int]]:
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {c: i for i, c in enumerate(classes)}


def tv_make_dataset(directory: str, class_to_idx: dict[str, int]) -> list[tuple[str, int]]:
    instances = []
    available = set()
    for target_class in sorted(class_to_idx.keys()):
        class_index = class_to_idx[target_class]
        target_dir = os.path.join(directory, target_class)
        if not os.path.isdir(target_dir):
            continue
        for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(root, fname)
                if path.lower().endswith(TV_IMG_EXTENSIONS):
                    instances.append((path, class_index))
                    available.add(target_class)
    empty = set(class_to_idx) - available
    if empty:
        raise FileNotFoundError(f"Found no valid file for the classes {', '.join(sorted(empty))}. ")
    return instances


def torchvision_view(root: Path) -> tuple[list[str], list[str], list[int]]:
    classes, class_to_idx = tv_find_classes(str(root))
    samples = tv_make_dataset(str(root), class_to_idx)
    return classes, [p for p, _ in samples], [t for _, t in samples]


def trdata_view(root: Path) -> tuple[list[str], list[str], list[int]]:
    ds = trdata.ImageFolder(root)
    return ds.classes, ds.paths, ds.labels


def jpeg_bytes(seed: int, size: int = 40) -> bytes:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def write_jpeg(path: str | bytes | Path, seed: int = 0) -> None:
    with open(path, "wb") as f:
        f.write(jpeg_bytes(seed))


def make_tree(root: Path, files: list[str]) -> None:
    for i, rel in enumerate(files):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        write_jpeg(p, seed=i)


def run_isolated(code: str, timeout_s: float = 60.0, limit_bytes: int = 4 << 30) -> dict:
    """Run `code` in a fresh interpreter capped at `limit_bytes` of address space; it prints one JSON line."""
    prelude = textwrap.dedent(
        f"""
        import json, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({limit_bytes}, {limit_bytes}))
        import trdata
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


LOADER_KW = dict(transforms=[trdata.Resize(32), trdata.CenterCrop(32)], dtype="uint8", layout="NHWC")


# ---- 1. Non-regular files ---------------------------------------------------------------------------------


@pytest.fixture
def fifo_and_good(tmp_path: Path) -> tuple[list[str], str]:
    good = []
    for i in range(3):
        write_jpeg(tmp_path / f"good{i}.jpg", seed=i)
        good.append(str(tmp_path / f"good{i}.jpg"))
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    return good, str(fifo)


def _raise_one_bad(paths: list[str]) -> dict:
    """Iterate `paths` with on_error="raise" in a subprocess: a regression hangs or exhausts memory there."""
    code = f"""
    paths = {paths!r}
    L = trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), batch_size=1, workers=1, shuffle=False,
                      on_error="raise", transforms=[trdata.Resize(32), trdata.CenterCrop(32)], dtype="uint8",
                      layout="NHWC")
    try:
        for _ in L:
            pass
        print(json.dumps({{"raised": None}}))
    except trdata.DecodeError as e:
        print(json.dumps({{"raised": "DecodeError", "path": e.path, "kind": e.kind, "message": str(e)}}))
    finally:
        L.close()
    """
    return run_isolated(code, timeout_s=60)


def test_fifo_in_file_list_raises_promptly_naming_it(fifo_and_good):
    good, fifo = fifo_and_good
    got = _raise_one_bad([good[0], fifo, good[1]])
    assert got["raised"] == "DecodeError" and got["path"] == fifo, got
    assert got["kind"] == "Io" and "FIFO" in got["message"], got


def test_dev_zero_in_file_list_raises_promptly_naming_it(tmp_path):
    write_jpeg(tmp_path / "good.jpg")
    got = _raise_one_bad([str(tmp_path / "good.jpg"), "/dev/zero"])
    assert got["raised"] == "DecodeError" and got["path"] == "/dev/zero", got
    assert got["kind"] == "Io" and "character device" in got["message"], got


def test_directory_in_file_list_raises_naming_it(tmp_path):
    write_jpeg(tmp_path / "good.jpg")
    (tmp_path / "dir.jpg").mkdir()
    got = _raise_one_bad([str(tmp_path / "good.jpg"), str(tmp_path / "dir.jpg")])
    assert got["raised"] == "DecodeError" and got["path"] == str(tmp_path / "dir.jpg"), got
    assert "directory" in got["message"], got


def test_non_regular_files_are_skipped_and_counted(fifo_and_good):
    good, fifo = fifo_and_good
    paths = good + [fifo, "/dev/zero"]
    code = f"""
    paths = {paths!r}
    L = trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), batch_size=5, workers=1, shuffle=False,
                      on_error="skip", transforms=[trdata.Resize(32), trdata.CenterCrop(32)], dtype="uint8",
                      layout="NHWC")
    batches = list(L)
    skipped = L.stats()["errors_skipped"]
    L.close()
    print(json.dumps({{"rows": sum(len(b.labels) for b in batches), "skipped": skipped}}))
    """
    got = run_isolated(code, timeout_s=60)
    assert got["rows"] == 5 and got["skipped"] >= 2, got


# ---- 2. Symlink loops ---------------------------------------------------------------------------------------


def test_one_symlink_loop_lists_each_file_once(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["a/x.jpg", "a/sub/y.jpg", "b/z.jpg"])
    expected = torchvision_view(root)  # before the loop: torchvision would list a's files 41 times after
    os.symlink("..", root / "a" / "sub" / "loop")
    assert trdata_view(root) == expected


def test_two_symlink_loops_finish_quickly_without_duplicates(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["a/x.jpg", "a/sub/y.jpg", "b/z.jpg"])
    expected = torchvision_view(root)
    os.symlink(".", root / "a" / "loop1")
    os.symlink("..", root / "a" / "sub" / "loop2")
    os.symlink("../..", root / "b" / "up")  # a link to the dataset root is an ancestor as well
    code = f"""
    ds = trdata.ImageFolder({str(root)!r})
    print(json.dumps([ds.classes, ds.paths, ds.labels]))
    """
    got = run_isolated(code, timeout_s=30, limit_bytes=3 << 30)
    assert tuple(got) == expected


def test_links_to_siblings_and_files_are_followed_like_torchvision(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["a/x.jpg", "a/deep/w.jpg", "b/y.jpg", "outside/o.jpg"])
    os.rename(root / "outside", tmp_path / "outside")
    os.symlink("../a", root / "b" / "to_a")  # a sibling class: followed, files listed under b too
    os.symlink("a", root / "c")  # a class folder that is a link
    os.symlink("../../outside/o.jpg", root / "b" / "linked.jpg")  # a symlinked file
    os.symlink("../../outside", root / "b" / "outdir")  # a link to a directory outside the root
    os.symlink(
        "missing.jpg", root / "a" / "broken.jpg"
    )  # in the dataset (torchvision lists it), fails at read
    expected = torchvision_view(root)
    assert trdata_view(root) == expected
    assert str(root / "b" / "to_a" / "deep" / "w.jpg") in expected[1]
    assert str(root / "a" / "broken.jpg") in expected[1]


def test_mutually_linked_siblings_list_each_file_once(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["c1/x/f.jpg", "c1/y/g.jpg"])
    os.symlink("../y", root / "c1" / "x" / "toy")
    os.symlink("../x", root / "c1" / "y" / "tox")
    # Directories are entered in path order: c1/x, c1/x/toy (= y), then c1/x/toy/tox (= x) and c1/y (= y)
    # are skipped. An ancestors-only check listed both files twice; torchvision's os.walk goes round the cycle.
    ds = trdata.ImageFolder(root)
    assert ds.paths == [str(root / "c1" / "x" / "f.jpg"), str(root / "c1" / "x" / "toy" / "g.jpg")]
    assert ds.labels == [0, 0]


def _mesh(root: Path, k: int, reverse: bool) -> None:
    """Class c with d0..d{k-1}, one JPEG each, and in every d_i a link to{j} -> ../d{j} for each j != i."""
    order = range(k - 1, -1, -1) if reverse else range(k)
    for i in order:
        (root / "c" / f"d{i}").mkdir(parents=True)
        write_jpeg(root / "c" / f"d{i}" / f"f{i}.jpg", seed=i)
    for i in order:
        for j in order:
            if j != i:
                os.symlink(f"../d{j}", root / "c" / f"d{i}" / f"to{j}")


def test_a_mesh_of_linked_siblings_lists_each_file_once(tmp_path):
    # k=6: every simple path is 1,956 listings (109,600 for k=8, ~10M for k=10) for an ancestors-only check.
    k = 6
    roots = [tmp_path / "fwd", tmp_path / "rev"]
    for root, reverse in zip(roots, (False, True)):
        _mesh(root, k, reverse)
    code = f"""
    import time
    out = []
    for root in {[str(r) for r in roots]!r}:
        t = time.monotonic()
        ds = trdata.ImageFolder(root)
        out.append([[p[len(root):] for p in ds.paths], ds.labels, time.monotonic() - t])
    print(json.dumps(out))
    """
    got = run_isolated(code, timeout_s=30, limit_bytes=3 << 30)
    # Path order enters d0, d0/to1 (= d1), d0/to1/to2 (= d2), ...: each file once, under that first path.
    expected, d = ["/c/d0/f0.jpg"], "/c/d0"
    for j in range(1, k):
        d += f"/to{j}"
        expected.append(f"{d}/f{j}.jpg")
    for (paths, labels, seconds), root in zip(got, roots):
        assert paths == expected and labels == [0] * k  # the same whatever order readdir gives
        assert sorted(os.path.realpath(str(root) + p) for p in paths) == sorted(
            str((root / "c" / f"d{i}" / f"f{i}.jpg").resolve()) for i in range(k)
        )
        assert seconds < 2.0, seconds


def test_an_exploding_symlink_dag_is_walked_once_per_directory(tmp_path):
    # No cycle, but 2^30 paths (two links from each level to the next): each directory is entered once.
    store = tmp_path / "store"
    depth = 30  # 31 links on the deepest path: under the kernel's limit of 40 per lookup
    for d in range(depth + 1):
        (store / f"d{d}").mkdir(parents=True)
        (store / f"d{d}" / f"f{d}.jpg").write_bytes(b"x")
    for d in range(depth):
        for name in ("l1", "l2"):
            os.symlink(store / f"d{d + 1}", store / f"d{d}" / name)
    (tmp_path / "root" / "a").mkdir(parents=True)
    os.symlink(store / "d0", tmp_path / "root" / "a" / "in")
    code = f"""
    ds = trdata.ImageFolder({str(tmp_path / "root")!r})
    print(json.dumps(ds.paths))
    """
    got = run_isolated(code, timeout_s=30, limit_bytes=3 << 30)
    base = str(tmp_path / "root" / "a" / "in")
    assert got == [base + "/l1" * d + f"/f{d}.jpg" for d in range(depth + 1)]


def test_a_long_scan_stops_on_ctrl_c(tmp_path):
    # A big tree, cheaply: 400 class links to one store of 1,000 directories are 400,000 directory visits
    # (classes are not deduplicated, like torchvision). Ctrl-C must end the scan, not wait for it: the interrupted
    # scan takes a fraction of an uninterrupted one, timed in the same process (no absolute time threshold).
    store = tmp_path / "store"
    for i in range(1000):
        (store / f"d{i}").mkdir(parents=True)
    (store / "x.jpg").write_bytes(b"x")
    (tmp_path / "root").mkdir()
    for i in range(400):
        os.symlink("../store", tmp_path / "root" / f"c{i:04d}")
    code = f"""
    import os, signal, threading, time
    # Python leaves SIGINT ignored when it starts with it ignored (a background job of a non-interactive shell):
    # give this process the interactive default, so the test does not depend on how pytest was launched.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    root = {str(tmp_path / "root")!r}
    t = time.monotonic()
    full = len(trdata.ImageFolder(root))
    full_seconds = time.monotonic() - t
    def ctrl_c():
        # Ctrl-C once the scan thread is running (a fixed delay raced a fast warm scan on a loaded box).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            names = []
            for tid in os.listdir("/proc/self/task"):
                try:
                    names.append(open(f"/proc/self/task/{{tid}}/comm").read().strip())
                except OSError:
                    pass
            if "trdata-scan" in names:
                break
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=ctrl_c, daemon=True).start()
    t = time.monotonic()
    try:
        trdata.ImageFolder(root)
        print(json.dumps({{"interrupted": False, "full": full, "full_seconds": full_seconds}}))
    except KeyboardInterrupt:
        print(json.dumps({{"interrupted": True, "full": full, "full_seconds": full_seconds,
                           "seconds": time.monotonic() - t}}))
    """
    got = run_isolated(code, timeout_s=300, limit_bytes=3 << 30)
    assert got["full"] == 400 and got["interrupted"], got
    assert got["seconds"] < got["full_seconds"] / 2, got


# ---- 3. Non-UTF-8 names -------------------------------------------------------------------------------------

# Names whose order differs between bytes and Python's code points: b"\x80x" sorts before "é" (0xC3 0xA9) as
# bytes, after it as surrogate-escaped str ("\udc80x" > "é").
NON_UTF8_CLASSES = [b"a", b"\x80x", "é".encode(), b"caf\xe9", b"\xff", "\ue000".encode(), b"z"]


@pytest.fixture
def non_utf8_root(tmp_path: Path) -> Path:
    if sys.getfilesystemencoding().lower() not in ("utf-8", "utf8"):
        pytest.skip("needs a UTF-8 filesystem encoding")
    root = tmp_path / "root"
    broot = os.fsencode(root)
    for i, cls in enumerate(NON_UTF8_CLASSES):
        d = os.path.join(broot, cls)
        os.makedirs(os.path.join(d, b"sub\xfe"))
        write_jpeg(os.path.join(d, b"img\xfe.jpg"), seed=i)
        write_jpeg(os.path.join(d, b"img.JPG"), seed=100 + i)
        write_jpeg(os.path.join(d, b"sub\xfe", b"\xc3.jpeg"), seed=200 + i)
    return root


def test_non_utf8_class_and_file_names_match_torchvision(non_utf8_root):
    expected = torchvision_view(non_utf8_root)
    assert len(expected[0]) == len(NON_UTF8_CLASSES)
    assert expected[0] != sorted(expected[0], key=os.fsencode)  # the byte order would be wrong
    assert trdata_view(non_utf8_root) == expected


def test_class_order_of_random_byte_names_matches_python(tmp_path):
    if sys.getfilesystemencoding().lower() not in ("utf-8", "utf8"):
        pytest.skip("needs a UTF-8 filesystem encoding")
    # Pieces mixing ASCII, valid multi-byte UTF-8 (2, 3 and 4 bytes, private use above the surrogates) and
    # invalid bytes (lone continuation, truncated sequences, 0xff): decoded by surrogateescape their code-point
    # order is not their byte order.
    pieces = [
        b"a",
        b"Z",
        b"-",
        b"\x80",
        b"\xbf",
        b"\xc3",
        b"\xc3\xa9",
        b"\xe4\xb8",
        b"\xe4\xb8\xad",
        b"\xee\x80\x80",
    ]
    pieces += [b"\xf0\x9f\x98\x80", b"\xf0\x9f", b"\xed\xa0\x80", b"\xff", b"\xfe"]
    rng = np.random.default_rng(11)
    names = set()
    while len(names) < 60:
        names.add(b"".join(pieces[i] for i in rng.integers(0, len(pieces), rng.integers(1, 4))))
    root = os.path.join(os.fsencode(tmp_path), b"root")
    for i, n in enumerate(sorted(names)):
        os.makedirs(os.path.join(root, n))
        write_jpeg(os.path.join(root, n, b"x.jpg"), seed=i)
    classes, paths, labels = trdata_view(Path(os.fsdecode(root)))
    assert (classes, paths, labels) == torchvision_view(Path(os.fsdecode(root)))
    assert [os.fsencode(c) for c in classes] != sorted(names)  # byte order would differ


def test_non_utf8_files_decode_through_the_loader(non_utf8_root):
    ds = trdata.ImageFolder(non_utf8_root)
    assert any("\udcfe" in p for p in ds.paths)
    with trdata.Loader(ds, batch_size=len(ds), workers=1, shuffle=False, on_error="raise", **LOADER_KW) as L:
        (batch,) = list(L)
    assert sorted(np.asarray(batch.labels).tolist()) == sorted(ds.labels)
    assert batch.images.shape[0] == len(ds)


def test_decode_error_names_a_non_utf8_path_exactly(tmp_path):
    if sys.getfilesystemencoding().lower() not in ("utf-8", "utf8"):
        pytest.skip("needs a UTF-8 filesystem encoding")
    p = os.path.join(os.fsencode(tmp_path), b"bad\xff.jpg")
    with open(p, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not a jpeg")
    with trdata.Loader(trdata.FileList([p]), batch_size=1, workers=1, **LOADER_KW) as L:
        with pytest.raises(trdata.DecodeError) as exc:
            list(L)
    assert exc.value.path == os.fsdecode(p)


# ---- 4. torchvision's file set and class mapping ------------------------------------------------------------


def _image_bytes(fmt: str) -> bytes:
    rng = np.random.default_rng(7)
    img = Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8))
    if fmt == "PGM":
        img, fmt = img.convert("L"), "PPM"
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


FORMATS = {
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".png": "PNG",
    ".ppm": "PPM",
    ".bmp": "BMP",
    ".pgm": "PGM",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".webp": "WEBP",
    ".gif": "GIF",
}
NOT_JPEG_PNG = (".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def test_file_set_and_labels_equal_torchvision(tmp_path):
    root = tmp_path / "root"
    (root / "k").mkdir(parents=True)
    for i, (ext, fmt) in enumerate(FORMATS.items()):
        (root / "k" / f"f{i}{ext}").write_bytes(_image_bytes(fmt))
        (root / "k" / f"F{i}{ext.upper()}").write_bytes(_image_bytes(fmt))
    for extra in ("notes.txt", "noext", ".jpg", "x.jpg.bak", "xjpg"):
        (root / "k" / extra).write_bytes(b"x")
    os.mkfifo(root / "k" / "pipe.jpg")  # not a directory: listed (it fails when read), as in torchvision
    # torchvision orders by directory (sorted root strings), then by file name: "k/z.jpg" before "k/a/..."
    make_tree(root, ["k/z.jpg", "k/a/b.jpg", "k/a-b/c.jpg", "k/a/x/d.jpg", "j/e.png", "l/f.webp"])
    expected = torchvision_view(root)
    got = trdata_view(root)
    assert got == expected
    assert str(root / "k" / ".jpg") in got[1] and str(root / "k" / "pipe.jpg") in got[1]
    assert not any(p.endswith(".gif") for p in got[1])


def test_every_listed_format_decodes_and_the_rest_fail_with_a_clear_error(tmp_path):
    for ext in (*NOT_JPEG_PNG, ".gif"):
        p = tmp_path / f"img{ext}"
        p.write_bytes(_image_bytes(FORMATS[ext]))
        with trdata.Loader(trdata.FileList([str(p)]), batch_size=1, workers=1, **LOADER_KW) as L:
            (batch,) = list(L)
        assert len(batch.indices) == 1, ext
    p = tmp_path / "img.avif"
    p.write_bytes(b"\0\0\0\x1cftypavif\0\0\0\0mif1")
    with trdata.Loader(trdata.FileList([str(p)]), batch_size=1, workers=1, **LOADER_KW) as L:
        with pytest.raises(trdata.DecodeError) as exc:
            list(L)
    assert exc.value.path == str(p) and exc.value.kind == "Unsupported", str(exc.value)
    assert "AVIF is not decoded yet" in str(exc.value), str(exc.value)


def test_undecodable_files_are_skipped_in_place(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["a/x.jpg", "b/y.jpg"])
    (root / "a" / "w.webp").write_bytes(b"RIFF\x10\0\0\0WEBPVP8 \0\0\0\0")  # truncated WebP
    ds = trdata.ImageFolder(root)
    assert ds.paths == [str(root / "a" / "w.webp"), str(root / "a" / "x.jpg"), str(root / "b" / "y.jpg")]
    with trdata.Loader(ds, batch_size=3, workers=1, shuffle=False, on_error="skip", **LOADER_KW) as L:
        (batch,) = list(L)
        assert L.stats()["errors_skipped"] >= 1


def test_class_without_valid_files_is_a_source_error(tmp_path):
    root = tmp_path / "root"
    make_tree(root, ["a/x.jpg"])
    (root / "b").mkdir()
    (root / "b" / "only.gif").write_bytes(_image_bytes("GIF"))
    (root / "c").mkdir()
    with pytest.raises(FileNotFoundError, match="no valid file"):
        tv_make_dataset(str(root), tv_find_classes(str(root))[1])
    with pytest.raises(trdata.SourceError, match=r"classes b, c\b") as exc:
        trdata.ImageFolder(root)
    assert isinstance(exc.value, FileNotFoundError)


def test_root_without_class_folders_is_a_source_error(tmp_path):
    (tmp_path / "x.jpg").write_bytes(jpeg_bytes(0))
    with pytest.raises(trdata.SourceError, match="class folder"):
        trdata.ImageFolder(tmp_path)
    with pytest.raises(trdata.SourceError):
        trdata.ImageFolder(tmp_path / "missing")


# ---- 5. FileList validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("paths", ["/a/b.jpg", b"/a/b.jpg", Path("/a/b.jpg")])
def test_file_list_refuses_a_single_path(paths):
    with pytest.raises(trdata.ConfigError, match=r"^invalid paths: ") as exc:
        trdata.FileList(paths, [0])
    assert exc.value.parameter == "paths"


@pytest.mark.parametrize(
    "labels",
    # (floats such as [0.7] or np.array([0.5]) are float targets now: tests/test_targets.py)
    [[float("nan")], ["3"], [b"3"], [2**63], [-(2**63) - 1], [None], [1 + 2j]],
)
def test_file_list_refuses_bad_labels(labels):
    with pytest.raises(trdata.ConfigError, match=r"^invalid labels: ") as exc:
        trdata.FileList(["/a/b.jpg"], labels)
    assert exc.value.parameter == "labels"


def test_file_list_refuses_a_single_label_string():
    with pytest.raises(trdata.ConfigError) as exc:
        trdata.FileList(["/a/b.jpg", "/a/c.jpg"], "01")
    assert exc.value.parameter == "labels"


@pytest.mark.parametrize(
    "labels, expected",
    [
        ([np.int64(3), np.uint8(2)], [3, 2]),
        (np.array([5, 2**63 - 1], dtype=np.int64), [5, 2**63 - 1]),
        (np.array([1, 2], dtype=np.uint64), [1, 2]),
        ([True, False], [1, 0]),
        ([-(2**63), 2**63 - 1], [-(2**63), 2**63 - 1]),
    ],
)
def test_file_list_accepts_integral_labels(labels, expected):
    fl = trdata.FileList(["/a/b.jpg", "/a/c.jpg"], labels)
    assert fl.labels == expected and all(type(v) is int for v in fl.labels)


def test_file_list_refuses_uint64_labels_beyond_int64():
    with pytest.raises(trdata.ConfigError) as exc:
        trdata.FileList(["/a/b.jpg"], np.array([2**63], dtype=np.uint64))
    assert exc.value.parameter == "labels"


def test_file_list_paths_accept_bytes_and_pathlike(tmp_path):
    fl = trdata.FileList([b"/a/\xff.jpg", Path("/a/b.jpg"), "/a/c.jpg"])
    assert fl.paths == ["/a/\udcff.jpg", "/a/b.jpg", "/a/c.jpg"] and fl.labels == [0, 0, 0]
    with pytest.raises(trdata.ConfigError) as exc:
        trdata.FileList(["/a/b.jpg", 3], [0, 1])
    assert exc.value.parameter == "paths" and "3" in str(exc.value)


def test_file_list_non_utf8_path_decodes(tmp_path):
    if sys.getfilesystemencoding().lower() not in ("utf-8", "utf8"):
        pytest.skip("needs a UTF-8 filesystem encoding")
    p = os.path.join(os.fsencode(tmp_path), b"\xff\xfe.jpg")
    write_jpeg(p)
    with trdata.Loader(trdata.FileList([p], [7]), batch_size=1, workers=1, **LOADER_KW) as L:
        (batch,) = list(L)
    assert np.asarray(batch.labels).tolist() == [7]


_DICT = {"/a/b.jpg": 0, "/a/c.jpg": 1}


@pytest.mark.parametrize(
    "paths",
    [
        {"/a/b.jpg", "/a/c.jpg"},
        frozenset({"/a/b.jpg", "/a/c.jpg"}),
        _DICT,
        _DICT.keys(),
        _DICT.values(),
        _DICT.items(),
    ],
    ids=["set", "frozenset", "dict", "keys", "values", "items"],
)
def test_file_list_refuses_unordered_paths(paths):
    # A set iterates in hash order (PYTHONHASHSEED for str): paths would pair with the labels arbitrarily.
    with pytest.raises(trdata.ConfigError, match=r"^invalid paths: a \w+ is not an ordered sequence") as exc:
        trdata.FileList(paths, [0, 1])
    assert exc.value.parameter == "paths"


@pytest.mark.parametrize("labels", [{0, 1}, frozenset({0, 1}), {0: 0, 1: 1}, {0: 0, 1: 1}.values()])
def test_file_list_refuses_unordered_labels(labels):
    with pytest.raises(trdata.ConfigError, match=r"^invalid labels: a \w+ is not an ordered sequence") as exc:
        trdata.FileList(["/a/b.jpg", "/a/c.jpg"], labels)
    assert exc.value.parameter == "labels"


@pytest.mark.parametrize(
    "paths",
    [
        ("/a/b.jpg", "/a/c.jpg"),
        (p for p in ["/a/b.jpg", "/a/c.jpg"]),
        np.array(["/a/b.jpg", "/a/c.jpg"]),
        iter(["/a/b.jpg", "/a/c.jpg"]),
        sorted({"/a/c.jpg", "/a/b.jpg"}),
    ],
    ids=["tuple", "generator", "ndarray", "iterator", "sorted-set"],
)
def test_file_list_accepts_ordered_paths(paths):
    fl = trdata.FileList(paths, (3, 4))
    assert fl.paths == ["/a/b.jpg", "/a/c.jpg"] and fl.labels == [3, 4]
    assert all(type(p) is str for p in fl.paths)
