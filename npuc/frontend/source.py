"""Source locations: which line of the user's model an exported node came from.

torch.export records, for every FX node, the Python stack (outermost frame first) that was active
when the node was traced.  The user's location is the innermost frame that is not inside PyTorch
itself (nor npuc): for ``out = self.bn1(out)`` in a torchvision ResNet that is
``torchvision/models/resnet.py:93``, not the line of ``torch/nn/functional.py`` that calls the
ATen op.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.fx

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)\n(?P<code>(?:    [^\n]*)?)')

_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in (Path(torch.__file__).parent, Path(__file__).resolve().parent.parent)
)


@dataclass(frozen=True)
class SourceLine:
    """One frame of user code: the file (shortened), the line number and the line's code."""

    file: str
    line: int
    code: str

    @property
    def loc(self) -> str:
        """``file:line``, the form graph nodes carry."""
        return f"{self.file}:{self.line}"


def user_frame(node: torch.fx.Node) -> SourceLine | None:
    """The innermost frame of user code of ``node``'s stack trace, if it has one."""
    trace = node.meta.get("stack_trace")
    if not trace:
        return None
    frames = [m for m in _FRAME.finditer(trace)]
    for m in reversed(frames):
        path = m.group("file")
        if _is_library(path):
            continue
        return SourceLine(short_path(path), int(m.group("line")), m.group("code").strip())
    return None


@functools.lru_cache(maxsize=4096)
def _is_library(path: str) -> bool:
    try:
        full = str(Path(path).resolve())
    except OSError:
        full = path
    return full.startswith(_LIBRARY_DIRS) or path.startswith("<")


@functools.lru_cache(maxsize=4096)
def short_path(path: str) -> str:
    """A path as a reader wants it: from the package for installed code, relative to the cwd for
    the user's own files, absolute otherwise."""
    marker = f"site-packages{os.sep}"
    if marker in path:
        return path.split(marker, 1)[1]
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path
