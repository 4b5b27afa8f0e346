"""What the output kinds' own zarr stores share (the cube directory's and the parquet
set's readers): read-only, serving whole documents and chunks by key from `_get_bytes`,
byte ranges cut from them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.buffer import default_buffer_prototype


class ReadOnlyStore(Store):
    """A read-only zarr Store whose subclass gives each key's bytes (`_get_bytes`, None
    when there is none) and its listing (`list`, `list_dir`)."""

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(self) -> None:
        super().__init__(read_only=True)

    def _get_bytes(self, key: str) -> bytes | None:
        raise NotImplementedError

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        prototype = prototype or default_buffer_prototype()
        data = self._get_bytes(key)
        if data is None:
            return None
        return prototype.buffer.from_bytes(slice_bytes(data, byte_range))

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]
                                 ) -> list[Buffer | None]:
        return [await self.get(k, prototype, r) for k, r in key_ranges]

    async def exists(self, key: str) -> bool:
        return self._get_bytes(key) is not None

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.list():
            if key.startswith(prefix):
                yield key

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    async def delete(self, key: str) -> None:
        self._check_writable()


def slice_bytes(data: bytes, r: ByteRequest | None) -> bytes:
    """The part of `data` a zarr byte request asks for."""
    if r is None:
        return data
    if isinstance(r, RangeByteRequest):
        return data[r.start:r.end]
    if isinstance(r, OffsetByteRequest):
        return data[r.offset:]
    if isinstance(r, SuffixByteRequest):
        return data[max(0, len(data) - r.suffix):]
    raise ValueError(f"unexpected byte range {r!r}")
