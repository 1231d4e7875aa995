"""Models and data sets named by their Hugging Face hub id, read from the local hub cache,
offline: bertctl never downloads. `hf:ORG/NAME` is a model, `hf:datasets/ORG/NAME` a data set,
each optionally `@REVISION` (a branch or tag the cache's refs/ name, or a commit) and a path
inside the snapshot after it (`hf:datasets/ORG/NAME/data/train.parquet`). The name resolves
to the snapshot directory huggingface_hub laid out (`{models,datasets}--ORG--NAME/snapshots/
COMMIT/`), so a stage reads it as any local directory and its lineage records the commit in
the path it read.
"""

from __future__ import annotations

import glob

import os
import re
from pathlib import Path

from bertctl.errors import BertctlError

PREFIX = "hf:"
_COMMIT = re.compile(r"[0-9a-f]{40}")


def cache_dir() -> Path:
    """Where huggingface_hub keeps its snapshots: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub (its own order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def is_hub_name(value: object) -> bool:
    return str(value).startswith(PREFIX)


def _split(spec: str) -> tuple[str, list[str], str | None, list[str]]:
    """(kind, repo id parts, revision, path inside) of `hf:...`; the repo id is the first
    one or two parts that name a repository in the cache (legacy ids have no organisation)."""
    body = spec[len(PREFIX):]
    kind = "models"
    if body.startswith("datasets/"):
        kind, body = "datasets", body[len("datasets/"):]
    elif body.startswith("models/"):
        body = body[len("models/"):]
    parts = [p for p in body.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise BertctlError(f"{spec}: not a hub name (hf:ORG/NAME, hf:datasets/ORG/NAME, "
                           f"optionally @REVISION and a path inside)")
    at = next((i for i, p in enumerate(parts) if "@" in p), None)
    if at is not None:
        if at > 1:
            raise BertctlError(f"{spec}: the revision follows the repository's name "
                               f"(hf:ORG/NAME@REVISION/PATH)")
        name, revision = parts[at].split("@", 1)
        return kind, [*parts[:at], name], revision or None, parts[at + 1:]
    two = len(parts) >= 2 and (cache_dir() / f"{kind}--{parts[0]}--{parts[1]}").is_dir()
    one = (cache_dir() / f"{kind}--{parts[0]}").is_dir()
    n = 1 if one and not two else min(2, len(parts))
    return kind, parts[:n], None, parts[n:]


def resolve(spec: str) -> Path:
    """The local snapshot path of a hub name, or BertctlError saying where it looked."""
    kind, repo, revision, inside = _split(spec)
    root = cache_dir() / f"{kind}--{'--'.join(repo)}"
    name = "/".join(repo)
    fill = (f"fill the cache where there is a network: huggingface-cli download "
            f"{'--repo-type dataset ' if kind == 'datasets' else ''}{name}"
            f"{' --revision ' + revision if revision else ''}")
    if not root.is_dir():
        raise BertctlError(f"{spec}: {name} is not in the local Hugging Face cache (looked in "
                           f"{root}); {fill}")
    wanted = revision or "main"
    if _COMMIT.fullmatch(wanted):
        commit = wanted
    else:
        ref = root / "refs" / wanted
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except OSError:
            raise BertctlError(f"{spec}: no revision {wanted!r} of {name} in the local cache "
                               f"(no {ref}); {fill}") from None
        if not _COMMIT.fullmatch(commit):
            raise BertctlError(f"{ref}: not a commit hash ({commit[:60]!r})")
    snapshot = root / "snapshots" / commit
    if not snapshot.is_dir():
        raise BertctlError(f"{spec}: the snapshot {commit} of {name} is not in the local cache "
                           f"(no {snapshot}); {fill}")
    path = snapshot.joinpath(*inside)
    if inside and not path.exists() and not glob.has_magic("/".join(inside)):
        raise BertctlError(f"{spec}: no {'/'.join(inside)} in the snapshot {commit} of {name} "
                           f"({snapshot})")
    return path
