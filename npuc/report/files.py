"""Writing a report file (trace, CSV, HTML): whole or not at all, with a sentence when it fails."""

from __future__ import annotations

from pathlib import Path

from npuc.fileio import write_atomic


def write_report_file(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it (npuc.fileio.write_atomic);
    a folder that is missing or not a folder, or a file that cannot be written, is a FileError
    naming it."""
    write_atomic(path, text, "the report")
    return Path(path)
