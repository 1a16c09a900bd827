"""Writing a report file (trace, CSV, HTML): whole or not at all, with a sentence when it fails."""

from __future__ import annotations

from pathlib import Path

from npuc.errors import NpucError


def write_report_file(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it (npuc.report.html); a
    folder that cannot be created or a file that cannot be written is an NpucError naming it."""
    from npuc.report.html import write_text_atomic

    for parent in Path(path).parents:
        if parent.exists() and not parent.is_dir():
            raise NpucError(f"cannot write '{path}': '{parent}' is a file, not a folder")
    try:
        return write_text_atomic(path, text)
    except OSError as e:
        raise NpucError(f"cannot write '{path}': {e.strerror or e}") from None
