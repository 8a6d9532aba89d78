"""Hypothesis strategies for workspace paths, and the directory layout they are aimed at.

A ``PathSpec`` is a path in the abstract (an anchor and segments); ``render`` turns it into
a string for one concrete ``Layout``: a workspace holding symbolic links that point out of
it, next to an ``outside`` directory holding a secret the sandbox must never touch.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs
from hypothesis import strategies as st

SECRET = "TOP-SECRET-5b1e0c7a: outside the workspace"

#: Names that mean something in the layout: links out, back in, loops, real files.
INTERESTING = (
    "..",
    ".",
    "",
    "out",
    "out_abs",
    "secret_link",
    "dangling",
    "dangling_dir",
    "loop",
    "up",
    "root_link",
    "inner",
    "sub",
    "back",
    "notes.txt",
    "ws",
    "outside",
    "secret.txt",
    "new.txt",
    "a\x00b",
)

#: Ordinary names, so that many generated paths are valid and the operations really run.
PLAIN = (".", "a", "b", "notes.txt", "sub", "inner", "new.txt", "d\u00e9j\u00e0 vu.md", "\u6587")

ANCHORS = ("/", "<root>", "<outside>", "<tmp>")


@attrs.frozen
class Layout:
    """A temporary tree: ``root`` (the workspace) and ``outside``, both under ``tmp``."""

    tmp: Path
    root: Path
    outside: Path


def build_layout(tmp: Path) -> Layout:
    """Create the workspace, the outside directory with its secret, and the links."""
    tmp = Path(os.path.realpath(tmp))
    root, outside = tmp / "ws", tmp / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET, encoding="utf-8")
    (root / "sub" / "notes.txt").write_text("inside\n", encoding="utf-8")
    links = {
        "out": "../outside",
        "out_abs": str(outside),
        "secret_link": str(outside / "secret.txt"),
        "dangling": str(outside / "new.txt"),
        "dangling_dir": str(outside / "newdir" / "x"),
        "loop": "loop",
        "up": "..",
        "root_link": "/",
        "inner": "sub",
        "sub/back": "../../outside",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    return Layout(tmp=tmp, root=root, outside=outside)


@attrs.frozen
class PathSpec:
    """A path before it meets a layout: ``anchor`` is "", "/" or a layout directory."""

    anchor: str
    segments: tuple[str, ...]
    trailing_slash: bool = False

    def render(self, layout: Layout) -> str:
        body = "/".join(self.segments) + ("/" if self.trailing_slash else "")
        anchors = {
            "": "",
            "/": "/",
            "<root>": f"{layout.root}/",
            "<outside>": f"{layout.outside}/",
            "<tmp>": f"{layout.tmp}/",
        }
        return anchors[self.anchor] + body


def segments() -> st.SearchStrategy[str]:
    """One path segment: an ordinary or meaningful name, arbitrary text, or a long one."""
    plain = st.sampled_from(PLAIN)
    return st.one_of(
        plain,
        plain,
        plain,
        st.sampled_from(INTERESTING),
        st.sampled_from(INTERESTING),
        st.text(min_size=1, max_size=12),
        st.text(alphabet="ab\u00e9\u6587", min_size=60, max_size=130),
    )


def path_specs() -> st.SearchStrategy[PathSpec]:
    """Paths of up to four segments under any anchor."""
    return st.builds(
        PathSpec,
        anchor=st.one_of(st.just(""), st.just(""), st.sampled_from(ANCHORS)),
        segments=st.lists(segments(), min_size=1, max_size=4).map(tuple),
        trailing_slash=st.sampled_from((False, False, False, True)),
    )
