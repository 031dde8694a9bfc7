"""Partial outputs: the temp files VectorWriter writes, named after the process that owns them.

A temp file is `.{output name}.{host}.{pid}.{random}.tmp`, with a journal beside it
(`...{random}.journal.tmp`) that says how many rows of it are complete and which input rows made
them. So a later run can tell a killed run's leftovers (same host, owner gone) from a live run's,
remove them, or continue from them (`bertlite embed --resume`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"
JOURNAL_SUFFIX = ".journal.tmp"
JOURNAL_VERSION = 1


def temp_prefix(target: Path) -> str:
    """The name every temp file of `target` written by this process starts with (mkstemp's prefix)."""
    return f".{target.name}.{_host()}.{os.getpid()}."


def journal_path(temp: Path) -> Path:
    """The journal beside a temp file."""
    return temp.with_name(temp.name.removesuffix(TEMP_SUFFIX) + JOURNAL_SUFFIX)


def write_journal(temp: Path, rows: int, size: int, input_digest: str, job: dict[str, Any]) -> None:
    """Record that the first `size` bytes of `temp` hold its first `rows` rows, made from the input rows
    whose InputDigest is `input_digest`, by a job with these settings.

    Written beside it and renamed over the old journal, so a kill leaves the old one or the new one.
    """
    journal = journal_path(temp)
    fresh = journal.with_name(journal.name.removesuffix(TEMP_SUFFIX) + ".new" + TEMP_SUFFIX)
    record = {"version": JOURNAL_VERSION, "rows": rows, "bytes": size, "input": input_digest, "job": job}
    fresh.write_text(json.dumps(record), encoding="utf-8")
    os.replace(fresh, journal)


@dataclass
class Partial:
    """A temp file a run that is gone left behind, and what its journal says of it."""

    data: Path
    journal: Path
    rows: int  # complete rows, per the journal
    size: int  # bytes those rows end at
    input_digest: str
    job: dict[str, Any]


def stale_files(target: Path) -> list[Path]:
    """The temp files (and journals) of `target` whose owner was a process of this host that is gone.

    Another host's files, a live process's, and names of any other pattern are never listed.
    """
    pattern = re.compile(
        re.escape(f".{target.name}.{_host()}.") + r"(\d+)\.[a-z0-9_]{8}(\.[a-z.]+)?" + re.escape(TEMP_SUFFIX)
    )
    found = []
    with os.scandir(target.parent) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match and entry.is_file(follow_symlinks=False) and not _alive(int(match.group(1))):
                found.append(Path(entry.path))
    return sorted(found)


def remove_stale(target: Path) -> int:
    """Remove stale_files(target).

    Returns:
        How many files were removed.
    """
    removed = 0
    for path in stale_files(target):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:  # another run cleaned it up first
            pass
    return removed


def latest_partial(target: Path) -> Partial | None:
    """The stale partial output of `target` with the most complete rows, or None.

    A temp file without a readable journal has no complete rows it can vouch for and is not offered.
    """
    best = None
    for path in stale_files(target):
        if not path.name.endswith(JOURNAL_SUFFIX):
            continue
        data = path.with_name(path.name.removesuffix(JOURNAL_SUFFIX) + TEMP_SUFFIX)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            found = Partial(
                data, path, int(record["rows"]), int(record["bytes"]), str(record["input"]), dict(record["job"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if record.get("version") != JOURNAL_VERSION or not data.is_file() or data.stat().st_size < found.size:
            continue
        if best is None or found.rows > best.rows:
            best = found
    return best


class InputDigest:
    """A running hash of the input rows in order: a resumed run checks that its first rows are the same."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.rows = 0

    def add(self, text: object) -> None:
        """Hash the next row (a text, or a (text_a, text_b) pair)."""
        data = json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")
        self._hash.update(len(data).to_bytes(8, "little") + data)
        self.rows += 1

    def hexdigest(self) -> str:
        """The digest of the rows added so far."""
        return self._hash.hexdigest()

    def through(self, rows: Iterable[Any]) -> Iterator[Any]:
        """Pass the rows on, hashing each as it is taken."""
        for row in rows:
            self.add(row)
            yield row


def _host() -> str:
    """This host's name as a file name can hold it (pids are per host)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "localhost"


def _alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # this process's own; on Windows os.kill(pid, 0) would kill
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
