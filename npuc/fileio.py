"""Reading and writing the files npuc produces and consumes, so that nothing is lost or torn.

Every file npuc writes (``.npub`` binaries, assembled code, traces, IR dumps, docs) goes through
:func:`write_atomic`: the bytes go to a temporary file beside the target, are flushed to the disk
(fsync), and the temporary file is renamed over the target.  A failed or interrupted write leaves
the old file whole, and a reader never sees an empty, torn or mixed file.  Every ``OSError``
becomes a :class:`~npuc.errors.FileError` naming the path.  :func:`check_output_path` checks an
output path before the work that produces it starts (a compile is not thrown away at the end for
a missing folder).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from npuc.errors import FileError


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def check_output_path(path: str | Path, what: str = "the output") -> Path:
    """``path`` as a Path once it is clear a file can be written there: its folder exists and is
    a folder, the path itself is not a folder, and the folder is writable."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise FileError(f"cannot write {what} '{p}': it is a folder; give a file name")
    if not parent.exists():
        blocker = next((a for a in parent.parents if a.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise FileError(f"cannot write {what} '{p}': '{blocker}' is a file, not a folder")
        raise FileError(f"cannot write {what} '{p}': the folder '{parent}' does not exist")
    if not parent.is_dir():
        raise FileError(f"cannot write {what} '{p}': '{parent}' is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FileError(f"cannot write {what} '{p}': no permission to write in '{parent}'")
    return p


def write_atomic(path: str | Path, data: bytes | str, what: str = "the file") -> None:
    """Write ``data`` (str as UTF-8) to ``path`` atomically (see the module docstring)."""
    p = check_output_path(path, what)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if p.exists():  # keep the permissions of the file being replaced
            os.chmod(tmp, p.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
        tmp = None
        _fsync_dir(p.parent if str(p.parent) else Path("."))
    except OSError as e:
        raise FileError(f"cannot write {what} '{p}': {_reason(e)}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def read_bytes(path: str | Path, what: str = "the file") -> bytes:
    """The bytes of ``path``; FileError naming it when it cannot be read."""
    p = Path(path)
    try:
        return p.read_bytes()
    except OSError as e:
        raise FileError(f"cannot read {what} '{p}': {_reason(e)}") from None


def read_text(path: str | Path, what: str = "the file") -> str:
    """The UTF-8 text of ``path``; FileError naming it when it cannot be read or decoded."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError(f"cannot read {what} '{path}': it is not UTF-8 text ({e.reason} at byte {e.start})") from None


def make_dir(path: str | Path, what: str = "the folder") -> Path:
    """``path`` created (with its parents) as a folder; FileError when it is a file or cannot be made."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise FileError(f"cannot use {what} '{p}': it is a file, not a folder")
    blocker = next((a for a in p.parents if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise FileError(f"cannot create {what} '{p}': '{blocker}' is a file, not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FileError(f"cannot create {what} '{p}': {_reason(e)}") from None
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (best effort: some file systems cannot open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
