"""Atomic writes: files are written to temporaries beside their target and renamed into place."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_temporaries(folder: Path, writers: dict[str, Callable[[str], None]]) -> dict[str, str]:
    """name -> a temp file in `folder` that writers[name](path) filled, with the mode the file `name` will
    get (result_mode): the caller renames them into place. All or none: if one writer fails, the temp
    files written so far are removed and the error goes on."""
    temporary: dict[str, str] = {}
    try:
        for name, write in writers.items():
            fd, temporary[name] = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
            os.close(fd)
            write(temporary[name])
            os.chmod(temporary[name], result_mode(folder / name))  # mkstemp's 0600 is for the temp file
    except BaseException:
        for tmp in temporary.values():
            Path(tmp).unlink(missing_ok=True)
        raise
    return temporary


def result_mode(target: Path) -> int:
    """The mode a file written to `target` should get: the replaced file's, or what the umask gives a new one."""
    try:
        return stat.S_IMODE(target.stat().st_mode)  # replacing a file keeps its permissions (e.g. 0600)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
