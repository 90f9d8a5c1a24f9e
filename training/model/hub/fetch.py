"""One model fetched from a Hugging Face hub into a shared cache, with its progress, as JSON lines.

Run as `python -m training.model.hub OWNER/NAME --cache-dir DIR --endpoint URL`; the token is HF_TOKEN of the
process's environment (the deployment's), never an argument. Each line on stdout is one of
  {"kind": "cached", "path": ...}                   the model was complete in the cache: nothing downloaded
  {"kind": "listing", "total": bytes, "files": n}   the hub's file sizes, before anything is written
  {"kind": "progress", "done": bytes, "total": bytes}
  {"kind": "done", "path": ...}                      the snapshot directory the engine loads
  {"kind": "error", "error": "..."}                  a named error; the exit code is then 2
The download honours nothing of the hub's offline switch (HF_HUB_OFFLINE): the caller starts this process
without it, so the engine's own processes keep it and never download anything themselves.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from training.types import TrainingError

REVISION = "main"  # the catalogue names models without a revision; the engine loads the same ref offline
PROGRESS_EVERY_S = 0.5
# Room left on the disk beyond the model's own bytes: the hub's lock and metadata files, and the engine's logs.
DISK_MARGIN_BYTES = 256 * 1024 * 1024


class HubFetchError(TrainingError):
    """A model that cannot be fetched, with the reason a deployment can act on."""


@dataclass(frozen=True)
class Listing:
    repo_id: str
    sizes: dict[str, int]  # file name -> bytes, as the hub's API reports them

    @property
    def total(self) -> int:
        return sum(self.sizes.values())


def size_text(done: int, total: int) -> str:
    """"3.1 of 16.4 GB": one unit for both, chosen by the total (a tiny model reads in MB, not 0.0 GB)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if total >= scale or unit == "KB":
            return f"{done / scale:.1f} of {total / scale:.1f} {unit}"
    raise AssertionError("unreachable")


def _host(endpoint: str) -> str:
    return urlsplit(endpoint).netloc or endpoint


def _storage(repo_id: str, cache_dir: Path) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir / repo_folder_name(repo_id=repo_id, repo_type="model")


def cached_snapshot(repo_id: str, cache_dir: Path) -> Path | None:
    """The complete snapshot of `repo_id` in `cache_dir`, or None; asks no hub (a second run downloads nothing).
    huggingface_hub checks the snapshot against the file listing it cached, so a download cut off midway is
    not taken for a complete one."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=REVISION, cache_dir=str(cache_dir), local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):  # IncompleteSnapshotError is one of these too
        return None


def _named(err: Exception, *, repo_id: str, endpoint: str, token: str | None) -> HubFetchError:
    """The hub's and the network's exceptions as the errors a run shows."""
    import httpx
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    host = _host(endpoint)
    if isinstance(err, (httpx.TransportError, OfflineModeIsEnabled)) and not isinstance(err, httpx.ProxyError):
        return HubFetchError(f"cannot reach the model hub at {host} to download {repo_id} "
                             f"({type(err).__name__}); check the workers' network or HF_ENDPOINT")
    if isinstance(err, HfHubHTTPError) and err.response is not None:
        status = err.response.status_code
        if status in (401, 403):
            if token:
                return HubFetchError(f"{repo_id} is refused to the workers' HF_TOKEN (the model hub at {host} "
                                     f"answered {status}): accept the model's terms on the hub with that account, "
                                     "or set a token that may read it")
            return HubFetchError(f"{repo_id} needs a token: set HF_TOKEN on the workers (the model hub at {host} "
                                 f"answered {status}: a gated or private model, or no such id)")
        if status == 404:
            return HubFetchError(f"{repo_id} is not on the model hub at {host} (404): check the catalogue's id")
        return HubFetchError(f"the model hub at {host} answered {status} for {repo_id}; try the run again later")
    if isinstance(err, OSError) and getattr(err, "errno", None) == 28:  # ENOSPC: the disk filled up meanwhile
        return HubFetchError(f"not enough disk for {repo_id}: the disk filled up while downloading it")
    return HubFetchError(f"could not download {repo_id} from {host}: {type(err).__name__}: {str(err)[:300]}")


def hub_listing(repo_id: str, *, endpoint: str, token: str | None) -> Listing:
    """The model's files and their sizes from the hub's API (nothing downloaded yet)."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint, token=token or False).model_info(
            repo_id, revision=REVISION, files_metadata=True)
    except Exception as err:  # noqa: BLE001 -- every failure becomes a named error below
        raise _named(err, repo_id=repo_id, endpoint=endpoint, token=token) from None
    return Listing(repo_id=repo_id, sizes={s.rfilename: int(s.size or 0) for s in info.siblings or []})


def downloaded_bytes(repo_id: str, cache_dir: Path) -> int:
    """Bytes of the model's blobs on disk, those being written (`.incomplete`) included."""
    total = 0
    for blob in (_storage(repo_id, cache_dir) / "blobs").glob("*"):
        try:
            total += blob.stat().st_size
        except OSError:  # renamed from .incomplete between the listing and the stat
            continue
    return total


def disk_problem(listing: Listing, cache_dir: Path) -> str | None:
    """Why the cache's disk cannot hold the model's remaining bytes, or None."""
    where = cache_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    needed = max(0, listing.total - downloaded_bytes(listing.repo_id, cache_dir))
    if needed + DISK_MARGIN_BYTES > free:
        return (f"not enough disk for {listing.repo_id}: it needs {needed / 1e9:.1f} GB and the workers' model "
                f"cache has {free / 1e9:.1f} GB free; free some space or set STUDIO_MODEL_CACHE_DIR to a larger disk")
    return None


def download(listing: Listing, *, cache_dir: Path, endpoint: str, token: str | None,
             report: Callable[[int, int], None], every_s: float = PROGRESS_EVERY_S) -> Path:
    """Downloads the model; `report(done, total)` every `every_s` while it does, read from the bytes on disk
    (the same whichever transfer huggingface_hub chooses)."""
    from huggingface_hub import snapshot_download

    result: dict[str, object] = {}

    def work() -> None:
        try:
            result["path"] = snapshot_download(listing.repo_id, revision=REVISION, cache_dir=str(cache_dir),
                                               endpoint=endpoint, token=token or False)
        except BaseException as err:  # noqa: BLE001 -- handed to the caller's thread
            result["error"] = err

    thread = threading.Thread(target=work, name="hub-download", daemon=True)
    thread.start()
    total = listing.total
    while thread.is_alive():
        report(min(downloaded_bytes(listing.repo_id, cache_dir), total), total)
        thread.join(every_s)
    if "error" in result:
        raise _named(result["error"], repo_id=listing.repo_id, endpoint=endpoint, token=token)  # type: ignore[arg-type]
    report(total, total)
    return Path(str(result["path"]))


def fetch(repo_id: str, *, cache_dir: Path, endpoint: str, token: str | None,
          emit: Callable[[dict], None]) -> Path:
    """The model's snapshot directory in `cache_dir`, downloaded unless it is there already."""
    if (path := cached_snapshot(repo_id, cache_dir)) is not None:
        emit({"kind": "cached", "path": str(path)})
        return path
    listing = hub_listing(repo_id, endpoint=endpoint, token=token)
    emit({"kind": "listing", "total": listing.total, "files": len(listing.sizes)})
    if problem := disk_problem(listing, cache_dir):
        raise HubFetchError(problem)
    path = download(listing, cache_dir=cache_dir, endpoint=endpoint, token=token,
                    report=lambda done, total: emit({"kind": "progress", "done": done, "total": total}))
    emit({"kind": "done", "path": str(path)})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.model.hub", description=__doc__.splitlines()[0])
    parser.add_argument("repo_id")
    parser.add_argument("--cache-dir", required=True, type=Path)
    parser.add_argument("--endpoint", required=True)
    args = parser.parse_args(argv)

    def emit(line: dict) -> None:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    args.cache_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        fetch(args.repo_id, cache_dir=args.cache_dir, endpoint=args.endpoint.rstrip("/"),
              token=os.environ.get("HF_TOKEN") or None, emit=emit)
    except HubFetchError as err:
        emit({"kind": "error", "error": str(err)})
        return 2
    print(f"fetched {args.repo_id} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0
