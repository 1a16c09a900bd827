"""Render an HTML file in headless Chromium: the console messages and whether each plot drew.

``render(path)`` runs Debian's ``chromium`` with ``--dump-dom`` (after the page's scripts ran, on
a virtual-time budget) and ``--enable-logging=stderr``, and returns a :class:`Rendered`: every
console message the page produced (an npuc report writes nothing to the console, so any message is
a defect: uncaught exceptions, failed loads, ``console.error``), and for each ``div.npuc-plot`` of
the page whether plotly drew it (``data-drawn="1"``, set when ``Plotly.newPlot`` resolved, and an
``svg.main-svg`` inside).

Chromium comes from ``.ci/run`` (``apt-get install -y chromium`` when missing).  When it is not
installed, the helper tries that same install once (as root, with apt-get); a test that needs it
is skipped, with a message saying so, only if that fails.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    "--enable-logging=stderr", "--v=1",
)
_CONSOLE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\] (.*)$")


@dataclass(frozen=True)
class Rendered:
    """What the browser made of a page."""

    dom: str
    console: tuple[str, ...]          # every console message, with its source
    plots: tuple[tuple[str, bool], ...]  # (div id, drawn) for each div.npuc-plot, in page order

    @property
    def all_plots_drawn(self) -> bool:
        return bool(self.plots) and all(drawn for _, drawn in self.plots)


def _install_chromium() -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=False)
    subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, capture_output=True,
                   timeout=1200, check=False)


@functools.cache
def chromium_path() -> str | None:
    """The Chromium executable, installing Debian's package once if it is missing."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    _install_chromium()
    return shutil.which("chromium")


def require_chromium() -> str:
    """The Chromium path, or skip with a message saying why."""
    path = chromium_path()
    if path is None:
        pytest.skip("headless Chromium is not installed and could not be installed "
                    "(apt-get install -y chromium); the browser test cannot run")
    return path


class _PlotFinder(HTMLParser):
    """Collects each div.npuc-plot: its id, its data-drawn flag, and whether an svg.main-svg is inside."""

    def __init__(self) -> None:
        super().__init__()
        self.plots: list[list] = []   # [id, drawn flag, has svg]
        self._stack: list[int | None] = []  # index of the plot each open div belongs to

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div":
            if "npuc-plot" in classes:
                self.plots.append([a.get("id", ""), a.get("data-drawn") == "1", False])
                self._stack.append(len(self.plots) - 1)
            else:
                self._stack.append(None)
        if tag == "svg" and "main-svg" in classes:
            owner = next((i for i in reversed(self._stack) if i is not None), None)
            if owner is not None:
                self.plots[owner][2] = True

    def handle_endtag(self, tag):
        if tag == "div" and self._stack:
            self._stack.pop()


def render(path: str | Path, budget_ms: int = 20000, timeout_s: int = 120) -> Rendered:
    """Load ``path`` in headless Chromium and report its console messages and plots."""
    exe = require_chromium()
    url = Path(path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="npuc-chromium-") as profile:
        proc = subprocess.run(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
             "--dump-dom", url],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise AssertionError(f"chromium failed on {path} (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    console = tuple(m.group(1) for line in proc.stderr.splitlines() if (m := _CONSOLE.search(line)))
    finder = _PlotFinder()
    finder.feed(proc.stdout)
    plots = tuple((pid, bool(drawn and svg)) for pid, drawn, svg in finder.plots)
    return Rendered(proc.stdout, console, plots)
