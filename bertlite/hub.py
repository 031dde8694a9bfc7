"""Find a checkpoint's files in a local folder or on the Hugging Face hub.

Hub files go through huggingface_hub, so revision, cache, token and offline
mode (HF_HUB_OFFLINE) behave as hub users expect. No torch import here.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import re
from pathlib import Path
from typing import Any

from bertlite.errors import CheckpointNotFoundError, DownloadError, NotCachedError


def is_local(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` is an existing local folder (else it is taken for a hub id)."""
    return os.path.isdir(name_or_path)


def resolve_file(
    name_or_path: str | os.PathLike,
    filename: str,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
    force_download: bool = False,
    subfolder: str = "",
) -> Path | None:
    """Find `filename` in a folder or hub repo, downloading it into the cache if needed.

    A freshly downloaded file is checked against its ETag (a content hash).

    Args:
        name_or_path: a local folder or a hub repo id.
        filename: the file's name in it.
        revision: a hub branch, tag or commit; None: the default branch.
        cache_dir: the hub cache; None: huggingface_hub's default.
        token: the hub token; None: huggingface_hub's default (HF_TOKEN or the login).
        local_files_only: use the cache only, never the network.
        force_download: download again even if cached.
        subfolder: the folder inside the repo or local folder that holds the file.

    Returns:
        The local path, or None when the folder or repo lacks the file.

    Raises:
        CheckpointNotFoundError: the folder/repo/revision itself is missing, gated, or not cached
            while offline: those are not "file absent" answers. Its subclass DownloadError means the
            hub was reached but the download failed (server error, dropped connection, wrong size or
            hash); the cache keeps nothing of it.
    """
    name = os.fspath(name_or_path)
    if is_local(name):
        path = Path(name, subfolder, filename)
        return path if path.is_file() else None
    if _looks_like_path(name):
        raise CheckpointNotFoundError(f"{name}: no such folder")
    return _hub_download(
        name,
        filename,
        revision=revision,
        cache_dir=cache_dir,
        token=token,
        local_files_only=local_files_only,
        force_download=force_download,
        subfolder=subfolder,
    )


def resolve_optional_file(name_or_path: str | os.PathLike, filename: str, **hub_kwargs: Any) -> Path | None:
    """resolve_file for a file a model may lack (sentence_bert_config.json, modules.json, ...): also None when it
    is not in the cache while offline (or the hub cannot be reached), as sentence-transformers reads such a file;
    a required file's own lookup then says when the repo itself is not cached.

    Args:
        name_or_path: a local folder or a hub repo id.
        filename: the file's name in it.
        **hub_kwargs: resolve_file's hub options.

    Returns:
        The local path, or None.

    Raises:
        CheckpointNotFoundError: as resolve_file, except NotCachedError.
    """
    try:
        return resolve_file(name_or_path, filename, **hub_kwargs)
    except NotCachedError:
        return None


def _hub_download(
    name: str,
    filename: str,
    *,
    revision: str | None,
    cache_dir: str | os.PathLike | None,
    token: str | bool | None,
    local_files_only: bool,
    force_download: bool,
    subfolder: str,
) -> Path | None:
    """resolve_file for a hub repo id: hf_hub_download, its errors in bertlite's words, the download verified.

    Args:
        name: the repo id.
        filename, revision, cache_dir, token, local_files_only, force_download, subfolder: as resolve_file
            takes them.

    Returns:
        The cached file's path, or None when the repo lacks the file.

    Raises:
        CheckpointNotFoundError: as resolve_file says.
    """
    # Imported here: it costs ~0.2 s, which a folder load (and --help) never needs.
    from huggingface_hub import hf_hub_download

    # From huggingface_hub.utils, not .errors: 0.24, the oldest version supported, has them only there.
    from huggingface_hub.utils import EntryNotFoundError, HFValidationError, LocalEntryNotFoundError

    where = f"{subfolder.strip('/')}/{filename}" if subfolder else filename
    # force_download replaces a cached blob in place: what it brings is new and must be checked as well.
    blobs_before = set() if force_download else _cached_blobs(name, cache_dir)
    try:
        path = Path(
            hf_hub_download(
                name,
                filename,
                subfolder=subfolder or None,
                revision=revision,
                cache_dir=cache_dir,
                token=token,
                local_files_only=local_files_only,
                force_download=force_download,
            )
        )
    except HFValidationError as e:
        raise CheckpointNotFoundError(f"{name!r} is neither a folder nor a valid hub repo id ({e})") from e
    except EntryNotFoundError as e:
        if isinstance(e, LocalEntryNotFoundError):
            raise _hub_error(e, name, where, revision) from e
        return None
    except Exception as e:
        error = _hub_error(e, name, where, revision)
        if error is None:
            raise
        raise error from e
    _verify_download(path, blobs_before, name, where)
    return path


# resolve_file's keyword arguments, the hub options that every from_pretrained passes on to it.
HUB_KWARGS = tuple(name for name, p in inspect.signature(resolve_file).parameters.items() if p.kind is p.KEYWORD_ONLY)


def pop_hub_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the hub options (HUB_KWARGS) out of a from_pretrained's keywords.

    Args:
        kwargs: the keywords; the hub options are removed from it in place.

    Returns:
        The hub options, by name.
    """
    return {key: kwargs.pop(key) for key in HUB_KWARGS if key in kwargs}


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


# --- hub errors, in words a user can act on -------------------------------------------

LOGIN_HINT = "log in with `hf auth login` or set HF_TOKEN (or pass token=)"


def _hub_error(error: BaseException, name: str, where: str, revision: str | None) -> CheckpointNotFoundError | None:
    """bertlite's error for a failed hf_hub_download of `where` from repo `name`; None if it is none of the known ones.

    huggingface_hub wraps a failed metadata (HEAD) call in LocalEntryNotFoundError once it has
    found no cached copy to fall back to; its cause says what really happened.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import (
        FileMetadataError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        LocalTokenNotFoundError,
    )

    if isinstance(error, LocalTokenNotFoundError):
        return None  # token=True without a stored token: huggingface_hub's own message says what to do
    endpoint = constants.ENDPOINT
    if isinstance(error, LocalEntryNotFoundError):
        return _not_cached_error(error, name, where, revision)
    if isinstance(error, ValueError) and isinstance(error.__cause__, Exception):
        return _hub_error(error.__cause__, name, where, revision)  # force_download=True wraps the HEAD error
    if isinstance(error, HfHubHTTPError):
        return _http_error(error, name, where, revision)
    if isinstance(error, FileMetadataError):
        return DownloadError(
            f"{name}: {endpoint} did not answer like a Hugging Face hub for {where} ({_first_line(error)}); "
            "check HF_ENDPOINT and any proxy"
        )
    if isinstance(error, (*_transport_errors(), OSError)):
        # What is left: the connection broke mid-file (after huggingface_hub's own retries), the bytes
        # did not add up to the advertised size, or the disk is full. huggingface_hub has already
        # deleted its temporary file, so the cache holds nothing of this download.
        return DownloadError(
            f"{name}: downloading {where}{_at(revision)} from {endpoint} failed ({_first_line(error)}); "
            "the partial file was discarded; retry, and if it keeps failing check the network, proxy and disk space"
        )
    return None


def _not_cached_error(error: BaseException, name: str, where: str, revision: str | None) -> CheckpointNotFoundError:
    """A LocalEntryNotFoundError: offline without a cached copy, the hub unreachable, or (its cause) a hub error."""
    from huggingface_hub import constants
    from huggingface_hub.utils import OfflineModeIsEnabled

    cause = error.__cause__
    offline = NotCachedError(
        f"{name}: {where} is not in the Hugging Face cache and the hub cannot be reached "
        "(HF_HUB_OFFLINE set, local_files_only=True, or no network); "
        "download it once while online, or pass a local folder"
    )
    if cause is None or isinstance(cause, OfflineModeIsEnabled):
        return offline
    if isinstance(cause, _transport_errors()):
        # Its own type: a caller probing several candidate files may still find another one in the cache.
        return NotCachedError(
            f"{name}: {where} is not in the Hugging Face cache and the hub at {constants.ENDPOINT} cannot be reached "
            f"({_first_line(cause)}); check the network and HF_ENDPOINT and retry, "
            "or set HF_HUB_OFFLINE=1 to use the cache only"
        )
    return _hub_error(cause, name, where, revision) or offline


def _http_error(error: BaseException, name: str, where: str, revision: str | None) -> CheckpointNotFoundError:
    """An HTTP error answer of the hub (HfHubHTTPError and its subclasses), by what the user can do about it."""
    from huggingface_hub import constants
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    endpoint = constants.ENDPOINT
    if isinstance(error, RevisionNotFoundError):
        return CheckpointNotFoundError(
            f"{name}: revision {revision!r} not found on {endpoint} (fetching {where}); "
            "check the branch, tag or commit hash"
        )
    status = error.response.status_code
    if isinstance(error, GatedRepoError):
        return CheckpointNotFoundError(
            f"{name}: cannot download {where}: the repo is gated (HTTP {status}); request access on its page "
            f"at {endpoint}/{name}, then {LOGIN_HINT} with an account that has been granted access"
        )
    if isinstance(error, RepositoryNotFoundError):
        return CheckpointNotFoundError(
            f"{name}: no such repo on {endpoint} (HTTP {status} for {where}); "
            f"check the repo id, or if the repo is private, {LOGIN_HINT}"
        )
    if status in (401, 403):
        return CheckpointNotFoundError(
            f"{name}: access to {where} denied (HTTP {status}); {LOGIN_HINT} with a token that can read this repo"
        )
    return DownloadError(
        f"{name}: downloading {where}{_at(revision)} from {endpoint} failed: the server answered HTTP {status}; "
        "nothing was cached; retry later"
    )


def _at(revision: str | None) -> str:
    return f" at revision {revision!r}" if revision else ""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Errors of a refused, dropped or timed-out connection: huggingface_hub 2.x speaks httpx2, 1.x httpx,
    0.x requests. Only those installed are imported, and only once a download has failed."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, name in (
        ("httpx2", "TransportError"),
        ("httpx", "TransportError"),
        ("requests", "ConnectionError"),
        ("requests", "Timeout"),
    ):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


# --- checking what was downloaded ---------------------------------------------------


def _blobs_folder(name: str, cache_dir: str | os.PathLike | None) -> Path:
    from huggingface_hub import constants

    cache = Path(cache_dir if cache_dir is not None else constants.HF_HUB_CACHE).expanduser().resolve()
    return cache / ("models--" + name.replace("/", "--")) / "blobs"


def _cached_blobs(name: str, cache_dir: str | os.PathLike | None) -> set[str]:
    try:
        return set(os.listdir(_blobs_folder(name, cache_dir)))
    except OSError:
        return set()


def _verify_download(path: Path, blobs_before: set[str], name: str, where: str) -> None:
    """Check a file this call downloaded against its ETag, which the hub sets to a hash of the content.

    huggingface_hub checks only the size of a plain HTTP download, so a proxy or mirror that
    serves other bytes of the right length would leave a corrupt file in the cache, trusted by
    every later load. Files already cached before the call are not hashed again.
    """
    blob = path.resolve()
    if blob.parent.name != "blobs" or blob.name in blobs_before:
        return  # a copy, not a symlink (no symlink support), or cached before this call
    etag = blob.name
    if re.fullmatch(r"[0-9a-f]{64}", etag):
        digest = hashlib.sha256()  # an LFS file: the sha256 of its content
    elif re.fullmatch(r"[0-9a-f]{40}", etag):
        digest = hashlib.sha1(f"blob {blob.stat().st_size}\0".encode())  # a git file: git's blob hash
    else:
        return  # an ETag that is not a content hash (some mirrors): nothing to check against
    with open(blob, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != etag:
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)
        raise DownloadError(
            f"{name}: the downloaded {where} does not match its hash (ETag {etag}, content {digest.hexdigest()}); "
            "the corrupt copy was removed from the cache; retry, and if it keeps failing check HF_ENDPOINT and proxies"
        )
