"""A checkpoint's files as a zip, produced chunk by chunk while the client downloads it: memory stays bounded
by one chunk whatever the adapter's size (a LoRA of a large model is hundreds of megabytes)."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Iterator

CHUNK = 1 << 20


class _Sink(io.RawIOBase):
    """A write-only, unseekable stream: zipfile then writes sizes after each entry (data descriptors)."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def checkpoint_zip_chunks(*, root: Path) -> Iterator[bytes]:
    """Every regular file under `root` (symlinks skipped: they could point outside the checkpoint)."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(root.rglob("*")):
            if not file.is_file() or file.is_symlink():
                continue
            info = zipfile.ZipInfo.from_file(file, file.relative_to(root))
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(file, "rb") as source, archive.open(info, "w", force_zip64=True) as entry:
                for block in iter(lambda: source.read(CHUNK), b""):
                    entry.write(block)
                    if data := sink.drain():
                        yield data
            if data := sink.drain():
                yield data
    yield sink.drain()
