"""Where sources and outputs live: local paths, or URLs (s3://, gs://, az://, http(s)://).

One small layer every other module uses for source I/O:

- `is_url(p)`, `normalize(p)`: a URL stays as given (`file://` becomes a local path); a local
  path becomes absolute; an unknown scheme is refused (`unsupported-scheme`).
- `stat(p)`: size, mtime_ns and, for objects, the ETag (or Last-Modified), the staleness key.
- `open_source(p)`: a read-only file object with exact range reads, counting requests and
  bytes. Local files are plain `io.FileIO`; remote objects are read through a small block
  cache (`BLOCK` bytes per block, neighbouring missing blocks fetched in one request), never
  read ahead as a whole.
- `read_range(p, offset, length)`: one range (os.pread locally, one ranged GET remotely).
- `glob(pattern)`, `listdir(p)`.

fsspec does the remote work; the options of each protocol come from `storage_options`,
set by the API's `storage_options=` and the CLI's `--storage-option [PROTOCOL.]KEY=VALUE`,
and from the environment variables the filesystems read themselves (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, ...). The rule telling the two forms apart: a top-level key that is a
protocol name (`s3`, `https`, ... of SUPPORTED) with a dict value holds that protocol's
options; every other key is flat and applies to every protocol. A protocol's options are
the flat ones, updated by those of its family (s3/s3a, gs/gcs, az/abfs/abfss, http/https),
updated by its own: `{"anon": False, "https": {...}, "s3": {...}}`.
"""

from __future__ import annotations

import io
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

from .model import Location, Problem, VirtualizeError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
BLOCK = 64 << 10  # remote reads are cached in blocks of this size
MAX_BLOCKS = 1024  # per open file (64 MiB); the oldest blocks are dropped beyond it
FETCH_BATCH = 32  # ranges `RemoteFile.fetch_many` asks at a time (fsspec's batch_size)
# protocols a source or output may use (fsspec implements them; the package of each must
# be installed: s3fs, gcsfs, adlfs, aiohttp)
SUPPORTED = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "http", "https", "memory")

# the package fsspec needs for each (tested against local servers: s3 with moto, http(s);
# gs:// and az:// are passed through to gcsfs / adlfs untested)
PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
            "abfs": "adlfs", "abfss": "adlfs", "http": "aiohttp", "https": "aiohttp"}

_options: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def protocol(p: str) -> str | None:
    m = _URL.match(p)
    return m.group(1).lower() if m else None


def is_url(p: str | os.PathLike) -> bool:
    """A remote location (any scheme but file://)."""
    proto = protocol(os.fspath(p)) if isinstance(p, (str, os.PathLike)) else None
    return proto is not None and proto != "file"


def unsupported(p: str) -> VirtualizeError:
    proto = protocol(p)
    return VirtualizeError([Problem(Location(p), "unsupported-scheme",
                                    f"{proto}:// is not a supported location (use a local path or "
                                    f"one of {', '.join(s + '://' for s in SUPPORTED)})")],
                           f"{p}: unsupported scheme {proto}://")


def normalize(p: str | os.PathLike) -> str:
    """A source or output location as recorded: URLs as given, local paths absolute."""
    p = os.fspath(p)
    proto = protocol(p)
    if proto is None:
        # `file:PATH` without `//` (file:/abs/x.zarr, file:rel.zarr): the path after it,
        # never a directory named "file:rel.zarr"
        return os.path.abspath(p[len("file:"):] if p[:5].lower() == "file:" else p)
    if proto == "file":
        rest = p[len("file://"):]
        return os.path.abspath(rest[len("localhost"):] if rest.startswith("localhost/") else rest)
    if proto not in SUPPORTED:
        raise unsupported(p)
    return p


def local_path(p: str | os.PathLike) -> str | os.PathLike:
    """A `file://` URL as the local path it names (`file:///abs/x.zarr`,
    `file://localhost/abs/x.zarr`: never `./file:/abs/x.zarr`), and `file:PATH` without
    `//` as PATH (`file:rel.zarr` is `rel.zarr`, relative); anything else as given."""
    q = os.fspath(p)
    return normalize(p) if protocol(q) == "file" or q[:5].lower() == "file:" else p


def credentials_hint(p: str) -> str:
    """Where the credentials of URL `p`'s protocol are set (for a message)."""
    proto = protocol(p) or ""
    if proto in ("s3", "s3a"):
        return ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the "
                "environment, or --storage-option s3.key=KEY --storage-option s3.secret=SECRET "
                "(API storage_options=); s3.anon=true reads a public bucket")
    return (f"set the credentials of {proto}:// with --storage-option {proto}.KEY=VALUE "
            "(API storage_options=) or the environment variables its filesystem reads")


def no_credentials(e: BaseException) -> bool:
    """An error saying that no credentials were found (botocore's NoCredentialsError, ...)."""
    return any(c.__name__ in ("NoCredentialsError", "PartialCredentialsError")
               for c in type(e).__mro__)


def set_options(options: dict[str, Any] | None) -> None:
    """Storage options for the remote filesystems of this process (replaces the previous):
    {protocol: {key: value}} sections and/or flat {key: value} for every protocol."""
    global _options
    options = dict(options or {})
    for k, v in list(options.items()):
        if not isinstance(k, str):
            raise ValueError(f"storage_options keys are names, not {k!r}")
        if k.lower() in SUPPORTED and k != k.lower() and isinstance(v, dict):
            options[k.lower()] = options.pop(k)
    _options = options


def get_options() -> dict[str, Any]:
    return dict(_options)


# protocols one fsspec filesystem serves: a section of one applies to the others too
FAMILIES = (("s3", "s3a"), ("gs", "gcs"), ("az", "abfs", "abfss"), ("http", "https"))


def _value(text: str) -> Any:
    """A command-line value typed: true/false/none (any case), numbers, JSON; else the text."""
    import json

    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_option(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` (or `PROTOCOL.KEY=VALUE`) from the command line; true/false/ints/JSON
    values are converted."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or key.startswith(".") or key.endswith(".") or ".." in key:
        raise ValueError(f"--storage-option wants KEY=VALUE or PROTOCOL.KEY=VALUE "
                         f"(s3.endpoint_url=http://...), not {text!r}")
    return key, _value(value)


def options_from_pairs(pairs: list[str] | None) -> dict[str, Any]:
    """{protocol: {key: value}} from `PROTOCOL.KEY=VALUE`, flat {key: value} from `KEY=VALUE`
    (every protocol); further dots nest (`s3.client_kwargs.region_name=eu-west-1`)."""
    out: dict[str, Any] = {}
    for text in pairs or []:
        key, value = parse_option(text)
        parts = key.split(".")
        if len(parts) > 1 and parts[0].lower() in SUPPORTED:
            parts[0] = parts[0].lower()
        elif parts[0].lower() in SUPPORTED and isinstance(value, dict):
            parts[0] = parts[0].lower()  # s3={"anon": true}: a whole section
        d = out
        for p in parts[:-1]:
            if not isinstance(d.get(p), dict):
                d[p] = {}
            d = d[p]
        d[parts[-1]] = value
    return out


def _is_section(key: str, value: Any) -> bool:
    return key in SUPPORTED and isinstance(value, dict)


def options_for(proto: str) -> dict[str, Any]:
    """The options of `proto`'s filesystem: flat ones, its family's section, its own
    section, then what the environment says where the options do not (s3)."""
    opts = {k: v for k, v in _options.items() if not _is_section(k, v)}
    family = next((f for f in FAMILIES if proto in f), (proto,))
    for name in [*(f for f in family if f != proto), proto]:
        own = _options.get(name)
        if isinstance(own, dict):
            opts.update(own)
    if proto in ("s3", "s3a"):
        # the endpoint and plain-HTTP switch as the AWS tools read them
        kwargs = opts.get("client_kwargs") or {}
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint and "endpoint_url" not in opts and "endpoint_url" not in kwargs:
            opts["endpoint_url"] = endpoint
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region and "region_name" not in kwargs:
            opts["client_kwargs"] = {**kwargs, "region_name": region}
        if os.environ.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true") and "use_ssl" not in opts:
            opts["use_ssl"] = False
    return opts


def filesystem(p: str):
    """The fsspec filesystem of URL `p` (cached per protocol and options)."""
    import fsspec

    proto = protocol(p) or "file"
    if proto not in SUPPORTED:
        raise unsupported(p)
    opts = options_for(proto)
    key = (proto, repr(sorted(opts.items())), tuple(sorted(environment().items())))
    with _lock:
        fs = _filesystems.get(key)
    if fs is not None:
        return fs
    try:
        fs = fsspec.filesystem(proto, skip_instance_cache=True, **opts)
    except ImportError:
        package = PACKAGES.get(proto, "the fsspec implementation of " + proto)
        raise VirtualizeError([Problem(Location(p), "unsupported-scheme",
                                       f"{proto}:// needs the {package} package, which is not "
                                       f"installed (pip install {package})")],
                              f"{p}: {proto}:// is not available: pip install {package}") from None
    except (TypeError, ValueError) as e:  # options the filesystem does not take
        raise VirtualizeError([Problem(Location(p), "unreadable",
                                       f"the storage options of {proto}:// are not accepted "
                                       f"({type(e).__name__}: {e}); options given: "
                                       f"{', '.join(sorted(opts)) or '(none)'}")],
                              f"{p}: bad storage options for {proto}://") from None
    with _lock:
        _filesystems[key] = fs
    return fs


def async_filesystems(protocols) -> dict[str, Any]:
    """{protocol: asynchronous fsspec filesystem with its own options}, for fsspec's
    `reference://` filesystem (`fs=`), which otherwise gives one protocol's options to all
    and opens only the first remote protocol it meets."""
    import fsspec

    out: dict[str, Any] = {}
    for proto in sorted({p for p in protocols if p and p != "file"}):
        url = f"{proto}://"
        if proto not in SUPPORTED:
            raise unsupported(url)
        filesystem(url)  # a missing package or bad options: a located problem
        fs = fsspec.filesystem(proto, skip_instance_cache=True, asynchronous=True,
                               **options_for(proto))
        if not fs.async_impl:  # memory://
            from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
            fs = AsyncFileSystemWrapper(fs, asynchronous=True)
        out[proto] = _closes_its_session(fs)
    return out


def _closes_its_session(fs):
    """`fs` (asynchronous) with its client session closed when it is dropped or at exit.
    fsspec's http and s3fs close the session they open on first use only for synchronous
    file systems, so each cube read over http(s):// or s3:// through `reference://` left
    aiohttp's "Unclosed client session" warning behind at exit."""
    import asyncio
    import weakref

    setter = getattr(type(fs), "set_session", None)
    close = getattr(type(fs), "close_session", None)
    if setter is None or close is None:
        return fs
    me = weakref.ref(fs)  # (the wrapper must not keep the file system alive)
    closing: set[int] = set()

    async def set_session(*args, **kwargs):
        this = me()
        session = await setter(this, *args, **kwargs)
        # what close_session takes: s3fs its client's context, http the aiohttp session
        held = getattr(this, "_s3creator", None) or getattr(this, "_session", None)
        if held is not None and id(held) not in closing:
            closing.add(id(held))
            weakref.finalize(this, close, asyncio.get_running_loop(), held)
        return session

    fs.set_session = set_session
    return fs


_ENV_PREFIXES = ("AWS_", "GOOGLE_", "GCS", "AZURE_", "FSSPEC_")
_filesystems: dict[tuple, Any] = {}


def environment() -> dict[str, str]:
    """The environment variables remote filesystems read (credentials, endpoints)."""
    return {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}


def set_environment(env: dict[str, str]) -> None:
    """Make this process's storage environment `env` (a scan worker takes its caller's,
    as it is when each file is submitted)."""
    for k in list(os.environ):
        if k.startswith(_ENV_PREFIXES) and k not in env:
            del os.environ[k]
    os.environ.update(env)


def fs_path(fs, p: str) -> str:
    """What the filesystem calls `p` (http keeps the whole URL, object stores drop it)."""
    return p if protocol(p) in ("http", "https") else fs._strip_protocol(p)


@dataclass
class Stat:
    st_size: int
    st_mtime_ns: int
    etag: str | None = None


RETRIES = 3  # tries of a request that failed transiently (connection, timeout, 5xx, 429)


def _transient(e: BaseException) -> bool:
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError, VirtualizeError)):
        return False
    status = getattr(e, "status", None)
    if isinstance(status, int):
        return status >= 500 or status == 429
    return isinstance(e, (ConnectionError, TimeoutError, OSError)) or "Timeout" in type(e).__name__ \
        or "Connection" in type(e).__name__


def retrying(call, *args, **kw):
    """`call(*args, **kw)`, tried again (after 0.2 s, 0.8 s) when it fails transiently."""
    import time

    for attempt in range(RETRIES):
        try:
            return call(*args, **kw)
        except Exception as e:
            if attempt == RETRIES - 1 or not _transient(e):
                raise
            time.sleep(0.2 * 4 ** attempt)


def request_problem(p: str, e: BaseException) -> VirtualizeError:
    """A failed remote request as a located problem: missing, forbidden, or unreadable."""
    text = f"{type(e).__name__}: {e}"
    status = getattr(e, "status", None)
    if status is not None:
        text = f"HTTP {status}: {getattr(e, 'message', '') or type(e).__name__}"
    if no_credentials(e):
        kind, what = "source-forbidden", f"no credentials were found ({credentials_hint(p)})"
    elif status in (401, 403):
        kind, what = "source-forbidden", "access is forbidden"
    elif status == 404 or isinstance(e, FileNotFoundError) or "404" in text or "NoSuchKey" in text:
        kind, what = "source-missing", "does not exist"
    elif isinstance(e, PermissionError) or "403" in text or "AccessDenied" in text \
            or "Forbidden" in text:
        kind, what = "source-forbidden", "access is forbidden"
    else:
        kind, what = "unreadable", "cannot be read"
    return VirtualizeError([Problem(Location(p), kind, f"{what} ({text[:300]})")],
                           f"{p}: {what}")


# what the current scan learned about its objects (sizes, first blocks), so that sniffing the
# format and scanning do not fetch the same bytes twice; `forget` starts afresh (each scan)
_recent_info: dict[str, dict[str, Any]] = {}
_recent_blocks: dict[str, tuple[int, dict[int, bytes], int, int]] = {}


def forget() -> None:
    _recent_info.clear()
    _recent_blocks.clear()


def remote_info(p: str) -> dict[str, Any]:
    info = _recent_info.get(p)
    if info is not None:
        return info
    info = _remote_info(p)
    if len(_recent_info) > 64:
        _recent_info.clear()
    _recent_info[p] = info
    return info


def _remote_info(p: str) -> dict[str, Any]:
    fs = filesystem(p)
    try:
        info = retrying(fs.info, fs_path(fs, p))
    except VirtualizeError:
        raise
    except FileNotFoundError as e:
        if protocol(p) not in ("http", "https"):
            raise request_problem(p, e) from None
        # fsspec's HTTP says "not found" for any failed HEAD + GET: ask for one byte to
        # learn the status (retried when transient), then again for the size
        try:
            retrying(fs.cat_file, p, start=0, end=1)
            info = retrying(fs.info, p)
        except Exception as e2:
            raise request_problem(p, e2) from None
    except Exception as e:
        raise request_problem(p, e) from None
    if info.get("type") == "directory":
        raise VirtualizeError([Problem(Location(p), "unreadable", "is a directory, not an object")],
                              f"{p}: is a directory")
    if info.get("size") is None:
        raise VirtualizeError([Problem(Location(p), "unreadable",
                                       "the server does not tell its size (no Content-Length)")],
                              f"{p}: size unknown")
    return info


def info_etag(info: dict[str, Any]) -> str | None:
    for k in ("ETag", "etag", "Etag", "md5", "Last-Modified", "LastModified", "last_modified"):
        v = info.get(k)
        if v:
            return str(v)
    return None


def info_mtime_ns(info: dict[str, Any]) -> int:
    import datetime

    v = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
    if isinstance(v, datetime.datetime):
        return int(v.timestamp() * 1e9)
    if isinstance(v, (int, float)):
        return int(v * 1e9)
    return 0


def stat(p: str) -> Stat:
    """Size, modification time and (remote) ETag of a source; raises OSError locally and a
    located VirtualizeError remotely."""
    if not is_url(p):
        st = os.stat(p)
        return Stat(st.st_size, st.st_mtime_ns)
    info = remote_info(p)
    return Stat(int(info["size"]), info_mtime_ns(info), info_etag(info))


class RemoteFile(io.RawIOBase):
    """A read-only, seekable file over one object: exact ranged reads through a block
    cache, counting `requests` and `bytes_read` (bytes fetched from the server)."""

    def __init__(self, url: str, size: int | None = None):
        super().__init__()
        self.url = url
        self.fs = filesystem(url)
        self._path = fs_path(self.fs, url)
        self.size = int(remote_info(url)["size"]) if size is None else size
        self.pos = 0
        self.requests = 0
        self.bytes_read = 0
        recent = _recent_blocks.get(url)
        self._blocks: dict[int, bytes] = {}
        if recent and recent[0] == self.size:  # the same object, just sniffed: its cost counts
            self._blocks = dict(recent[1])
            self.requests, self.bytes_read = recent[2], recent[3]

    def close(self) -> None:
        # (getattr: an __init__ that failed, its filesystem not installed, is closed at
        # collection before it set its blocks)
        if not self.closed and getattr(self, "_blocks", None):
            if len(_recent_blocks) >= 4:
                _recent_blocks.pop(next(iter(_recent_blocks)))
            _recent_blocks[self.url] = (self.size, dict(list(self._blocks.items())[:16]),
                                        self.requests, self.bytes_read)
        super().close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def fetch(self, start: int, end: int) -> bytes:
        """One ranged request for [start, end)."""
        if end <= start:
            return b""
        try:
            data = retrying(self.fs.cat_file, self._path, start=start, end=end)
        except Exception as e:
            raise request_problem(self.url, e) from None
        self.requests += 1
        self.bytes_read += len(data)
        return data

    def fetch_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Exact ranges [start, end) at once (fsspec's `cat_ranges`: concurrent where the
        filesystem is), counted as one request each."""
        if not ranges:
            return []
        try:
            out = retrying(self.fs.cat_ranges, [self._path] * len(ranges),
                           [a for a, _ in ranges], [b for _, b in ranges], on_error="raise",
                           **({"batch_size": FETCH_BATCH} if self.fs.async_impl else {}))
            if any(isinstance(b, BaseException) for b in out):
                raise next(b for b in out if isinstance(b, BaseException))
        except Exception as e:
            raise request_problem(self.url, e) from None
        self.requests += len(ranges)
        self.bytes_read += sum(len(b) for b in out)
        return out

    def _load(self, first: int, last: int) -> None:
        """Blocks first..last in the cache, missing runs fetched one request each."""
        b = first
        while b <= last:
            if b in self._blocks:
                b += 1
                continue
            e = b
            while e + 1 <= last and e + 1 not in self._blocks:
                e += 1
            data = self.fetch(b * BLOCK, min((e + 1) * BLOCK, self.size))
            for k in range(b, e + 1):
                self._blocks[k] = data[(k - b) * BLOCK:(k - b + 1) * BLOCK]
            b = e + 1
        while len(self._blocks) > MAX_BLOCKS:
            self._blocks.pop(next(iter(self._blocks)))

    def pread(self, n: int, offset: int) -> bytes:
        end = min(offset + max(n, 0), self.size)
        if end <= offset:
            return b""
        if end - offset >= 4 * BLOCK:  # a large read goes straight through, uncached
            return self.fetch(offset, end)
        first, last = offset // BLOCK, (end - 1) // BLOCK
        self._load(first, last)
        parts = [self._blocks[k] for k in range(first, last + 1)]
        buf = b"".join(parts) if len(parts) > 1 else parts[0]
        return buf[offset - first * BLOCK:end - first * BLOCK]

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        data = self.pread(n, self.pos)
        self.pos += len(data)
        return data

    def readinto(self, b) -> int:
        m = memoryview(b).cast("B")
        data = self.read(len(m))
        m[:len(data)] = data
        # past the end of the object the rest is zeroed, as HDF5's own driver does (h5py's
        # file-object driver would leave the buffer's tail as it was: memory that changes
        # from run to run)
        m[len(data):] = bytes(len(m) - len(data))
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)


class LocalFile(io.FileIO):
    """A local read-only file counting bytes and reads (`requests`)."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(os.fspath(path), "rb")
        self.bytes_read = 0
        self.requests = 0

    def readinto(self, b):  # type: ignore[override]
        n = super().readinto(b)
        self.bytes_read += n or 0
        self.requests += 1
        return n

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        data = super().read(size)
        self.bytes_read += len(data or b"")
        self.requests += 1
        return data

    def pread(self, n: int, offset: int) -> bytes:
        return os.pread(self.fileno(), n, offset)


def open_source(p: str, size: int | None = None):
    """A source opened for reading: a LocalFile, or a RemoteFile for a URL."""
    if is_url(p):
        return RemoteFile(p, size)
    return LocalFile(p)


def file_size(f) -> int:
    if isinstance(f, RemoteFile):
        return f.size
    return os.fstat(f.fileno()).st_size


def read_range(p: str, offset: int, length: int) -> bytes:
    """`length` bytes at `offset` (fewer at the end of the file)."""
    if not is_url(p):
        with open(p, "rb") as f:
            return os.pread(f.fileno(), length, offset)
    fs = filesystem(p)
    try:
        return retrying(fs.cat_file, fs_path(fs, p), start=offset, end=offset + length)
    except Exception as e:
        raise request_problem(p, e) from None


def has_magic(p: str) -> bool:
    return any(c in p for c in "*?[")


def glob(pattern: str) -> list[str]:
    """The objects matching a URL pattern, as URLs, sorted."""
    fs = filesystem(pattern)
    proto = protocol(pattern)
    try:
        found = fs.glob(fs_path(fs, pattern))
    except Exception as e:
        raise request_problem(pattern, e) from None
    out = []
    for f in found:
        out.append(f if protocol(f) else f"{proto}://{f}")
    return sorted(out)


def isdir(p: str) -> bool:
    if not is_url(p):
        return os.path.isdir(p)
    if protocol(p) in ("http", "https"):
        return False
    fs = filesystem(p)
    try:
        return fs.isdir(fs_path(fs, p))
    except Exception:
        return False


def listdir(p: str) -> list[str]:
    """Objects directly under the URL prefix `p` (not hidden), sorted."""
    fs = filesystem(p)
    proto = protocol(p)
    out = []
    for info in fs.ls(fs_path(fs, p), detail=True):
        name = info["name"]
        if info.get("type") == "directory" or name.rsplit("/", 1)[-1].startswith("."):
            continue
        out.append(name if protocol(name) else f"{proto}://{name}")
    return sorted(out)


def dirname(p: str) -> str:
    """The URL prefix (ending in '/') or directory holding `p`."""
    if is_url(p):
        return p.rsplit("/", 1)[0] + "/"
    return os.path.dirname(p)


def relative(p: str, base: str) -> str:
    """`p` relative to the directory or URL prefix `base` (POSIX `..` steps) when both are
    local or both on the same scheme and host; else `p` unchanged (absolute)."""
    import posixpath
    from urllib.parse import urlsplit

    if not is_url(p) and not is_url(base):
        return os.path.relpath(p, base)
    if is_url(p) and is_url(base):
        a, b = urlsplit(p), urlsplit(base)
        if (a.scheme, a.netloc) == (b.scheme, b.netloc) and not a.query and not b.query:
            rel = posixpath.relpath(a.path, b.path.rstrip("/") or "/")
            return rel + "/" if a.path.endswith("/") and not rel.endswith("/") else rel
    return p


def resolve(p: str, base: str) -> str:
    """A recorded path: absolute paths and URLs as they are, relative ones against `base`
    (the cube's own directory or URL)."""
    import posixpath
    from urllib.parse import urlsplit, urlunsplit

    if protocol(p) is not None or os.path.isabs(p):
        return p
    if is_url(base):
        b = urlsplit(base)
        path = posixpath.normpath(posixpath.join(b.path.rstrip("/") + "/", p))
        if p.endswith("/") and not path.endswith("/"):  # a prefix stays a prefix
            path += "/"
        return urlunsplit((b.scheme, b.netloc, path, "", ""))
    return os.path.normpath(os.path.join(os.path.abspath(base), p))


def common_dir(paths: list[str]) -> str:
    """The deepest directory (or URL prefix, without its trailing '/') holding every one
    of `paths`: all local, or all URLs of one scheme and host."""
    import posixpath
    from urllib.parse import urlsplit

    if not any(is_url(p) for p in paths):
        return os.path.commonpath([os.path.dirname(p) for p in paths])
    parts = [urlsplit(p) for p in paths]
    common = posixpath.commonpath([posixpath.dirname(u.path) or "/" for u in parts])
    return f"{parts[0].scheme}://{parts[0].netloc}{common.rstrip('/')}"
