"""Find a checkpoint's files in a local folder or on the Hugging Face hub.

Hub files go through huggingface_hub, so revision, cache, token and offline
mode (HF_HUB_OFFLINE) behave as hub users expect. No torch import here.
"""

from __future__ import annotations

import os
from pathlib import Path


class CheckpointNotFoundError(OSError):
    """The folder or hub repo does not exist, or cannot be reached."""


class NotCachedError(CheckpointNotFoundError):
    """Offline (or the hub is unreachable) and the file is not in the local cache."""


def is_local(name_or_path: str | os.PathLike) -> bool:
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
    """Path of `filename` in a folder or hub repo, or None when the repo lacks it.

    Raises CheckpointNotFoundError when the folder/repo/revision itself is missing,
    gated, or not cached while offline: those are not "file absent" answers.
    """
    name = os.fspath(name_or_path)
    if is_local(name):
        path = Path(name, subfolder, filename)
        return path if path.is_file() else None
    if _looks_like_path(name):
        raise CheckpointNotFoundError(f"{name}: no such folder")
    # Imported here: it costs ~0.2 s, which a folder load (and --help) never needs.
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return Path(
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
    except GatedRepoError as e:
        raise CheckpointNotFoundError(
            f"{name}: the repo is gated; accept its terms on the hub and pass token= (or run `hf auth login`)"
        ) from e
    except RepositoryNotFoundError as e:
        raise CheckpointNotFoundError(f"{name}: no such repo on the hub (or it is private: pass token=)") from e
    except RevisionNotFoundError as e:
        raise CheckpointNotFoundError(f"{name}: revision {revision!r} not found") from e
    except LocalEntryNotFoundError as e:
        # Its own type: a caller probing several candidate files may still find
        # another one in the cache.
        raise NotCachedError(
            f"{name}: {filename} is not in the Hugging Face cache and the hub cannot be reached "
            "(HF_HUB_OFFLINE set or no network); download it once while online, or pass a local folder"
        ) from e
    except EntryNotFoundError:
        return None


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name
