"""Publishing a profile: validate the exact bytes, then rename into place.

A running server hot-reloads ``profiles/<label>.yaml``; it must never see a
half-written file or one that fails validation.  The candidate is written with
``save_profile`` (itself atomic) to a hidden sibling, read back with
``load_profile`` — the loader the server uses — and only then renamed over the
published path.  A candidate that fails is deleted and the old file stays.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from sglang_cast.profile import LoadedProfile, Profile, ProfileError, load_profile, save_profile

from .errors import RUNTIME, AutotuneError
from .store import Store


def _readable_mode() -> int:
    """What a plain ``open(..., "w")`` would create: 0666 minus the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def publish(profile: Profile, path: str | Path, store: Store | None = None, study: str | None = None,
            trial: int | None = None, live: list[dict] | None = None) -> LoadedProfile:
    """Write ``profile`` to ``path`` (validated, atomic) and record it in ``store``
    with the live gate's per-bucket numbers ``live``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # profiles/sglang/ on its first profile
    candidate = path.parent / f".{path.name}.{os.getpid()}.candidate"
    try:
        save_profile(profile, candidate)
        loaded = load_profile(candidate)
    except (ProfileError, yaml.YAMLError, ValueError, TypeError) as err:
        candidate.unlink(missing_ok=True)
        raise AutotuneError(f"refusing to publish {path}: the profile does not validate: {err}", RUNTIME) from None
    except OSError as err:
        candidate.unlink(missing_ok=True)
        raise AutotuneError(f"cannot write {path}: {err.strerror}", RUNTIME) from None
    candidate.chmod(_readable_mode())  # save_profile's temp file is private (0600); a server may run as another user
    os.replace(candidate, path)
    if store is not None:
        store.record_publication(path.resolve(), profile.label, loaded.version, profile.source, study, trial,
                                 live)
    return LoadedProfile(loaded.profile, path, loaded.version)
