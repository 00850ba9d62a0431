"""The documentation is tested like code.

(a) Every ```python block of README.md and docs/guide/*.md runs, one test per block. The blocks of one page run in
    order in one shared namespace (a later block may use what an earlier one made), in a temporary working folder
    of that page. A block is skipped when the line before its fence is ``<!-- skip: reason -->``, except two
    conditional reasons: ``needs CUDA`` skips only when torch sees no CUDA device (the block runs on a GPU
    machine), ``needs <module>`` (``needs torchvision``, ``needs timm``) only when that module is missing. Blocks make
    their own small data (a few JPEGs written with PIL) and run in seconds on 2 cores.
(b) Every relative link of README.md, CONTRIBUTING.md and docs/**/*.md names an existing file, and its ``#anchor``
    (when the target is Markdown) one of that file's headings, slugged as mkdocs slugs them.
(c) ``mkdocs build --strict`` succeeds (skipped when mkdocs-material is not installed: ``make docs`` needs it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_PAGES = [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]
LINK_PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>```+|~~~+)(?P<info>[^\n`]*)$")
SKIP = re.compile(r"^\s*<!--\s*skip:\s*(?P<reason>.*?)\s*-->\s*$")


def _blocks(page: Path) -> list[tuple[int, str, str, str | None]]:
    """(line number, info string, code, skip reason) of every fenced block of ``page``, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, info = m["indent"], m["ticks"], m["info"].strip()
        start = i
        body = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(ticks) and lines[i].strip().strip(ticks[0]) == ""
        ):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = SKIP.match(prev)
        out.append((start + 1, info, "\n".join(body) + "\n", skip["reason"] if skip else None))
    return out


def _python_blocks() -> list[Any]:
    params = []
    for page in RUN_PAGES:
        for line, info, code, reason in _blocks(page):
            if info.split()[:1] != ["python"]:
                continue
            rel = page.relative_to(REPO).as_posix()
            params.append(pytest.param(rel, line, code, reason, id=f"{rel}:{line}"))
    return params


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


PYTHON_BLOCKS = _python_blocks()
#: The line of each page's last python block (its loaders are closed after it).
_LAST_LINE: dict[str, int] = {}
for _p in PYTHON_BLOCKS:
    _LAST_LINE[_p.values[0]] = max(_LAST_LINE.get(_p.values[0], 0), _p.values[1])


def _needs_met(reason: str) -> bool:
    """Whether a ``needs …`` skip reason is met here (then the block runs); any other reason never is."""
    m = re.match(r"needs\s+([A-Za-z_][\w.]*)", reason)
    if m is None:
        return False
    if m[1].lower() == "cuda":
        return _cuda()
    return importlib.util.find_spec(m[1]) is not None


#: Per page: its namespace, its working folder, and whether an earlier block failed.
_PAGES: dict[str, dict[str, Any]] = {}


@pytest.mark.parametrize(("page", "line", "code", "reason"), PYTHON_BLOCKS)
def test_python_block(
    page: str, line: int, code: str, reason: str | None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = _PAGES.setdefault(
        page,
        {"ns": {"__name__": f"docs:{page}"}, "cwd": tmp_path_factory.mktemp("docs"), "failed": None},
    )
    if reason is not None and not _needs_met(reason):
        pytest.skip(reason)
    if state["failed"] is not None:
        pytest.skip(f"an earlier block of {page} (line {state['failed']}) failed")
    old = os.getcwd()
    os.chdir(state["cwd"])
    try:
        exec(compile(code, f"{page}:{line}", "exec"), state["ns"])
    except BaseException:
        state["failed"] = line
        raise
    finally:
        os.chdir(old)
        # close loaders a page left open, so their threads do not outlive the page's last block
        if line == _LAST_LINE[page]:
            for v in list(state["ns"].values()):
                if type(v).__name__ == "Loader" and hasattr(v, "close"):
                    v.close()


# ---------------------------------------------------------------------------------------------------- links

LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def _slug(heading: str) -> str:
    """Python-Markdown's toc slugify (what mkdocs uses) of a Markdown heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page (fenced blocks ignored; repeated headings get _1, _2, …)."""
    seen: dict[str, int] = {}
    out = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_fence or not m:
            continue
        slug = _slug(m[1])
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}_{n}")
    return out


def _links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of the relative links of ``page`` outside code."""
    out = []
    in_fence = False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for m in LINK.finditer(INLINE_CODE.sub("", line)):
            target = m["target"]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            out.append((n, target))
    return out


@pytest.mark.parametrize("page", LINK_PAGES, ids=[p.relative_to(REPO).as_posix() for p in LINK_PAGES])
def test_links(page: Path) -> None:
    bad = []
    for n, target in _links(page):
        path, _, anchor = target.partition("#")
        dest = page if path == "" else (page.parent / path).resolve()
        if not dest.exists():
            bad.append(f"line {n}: {target} (no such file)")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"line {n}: {target} (no heading #{anchor} in {dest.relative_to(REPO)})")
    assert not bad, f"broken links in {page.relative_to(REPO)}:\n" + "\n".join(bad)


def test_every_page_has_blocks_or_links() -> None:
    """The collectors found something (a parser broken by a format change would pass every test above)."""
    assert PYTHON_BLOCKS, "no python block found in README.md and docs/guide/*.md"
    assert any(_links(p) for p in LINK_PAGES), "no relative link found"


# ---------------------------------------------------------------------------------------------------- the site


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs-material is not installed (scripts/setup.sh installs it)",
)
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(REPO / "mkdocs.yml"),
            "-d",
            str(tmp_path),
        ],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "index.html").is_file()
