"""What the scanners share of file access: digests of stored blocks and of values, the
system locations nothing is read from on a file's say-so, and the errors of a file that
cannot be read (its library missing, or not valid)."""

from __future__ import annotations

import functools
import os

import numpy as np

from ..model import Location, Problem, VirtualizeError

BLOCK_DIGEST = np.dtype("V16")  # one block's digest: 16 bytes of BLAKE2b
OPEN_FILES = 64  # data files digest_blocks keeps open at once
# A block table of more blocks is not built (a damaged header's sizes, or just huge): the
# variable is refused as `too-many-blocks` before anything is allocated (as HDF5's).
MAX_BLOCKS = 1 << 27


def digest_blocks(paths: str | list[str], refs, pread=None) -> tuple[str, np.ndarray]:
    """Per block, a 16-byte BLAKE2b of its stored bytes (its length first; a block never
    written digests as length 0), shaped like `refs`; and their SHA-256 (`summary`).

    Used to check that a variable without the concatenation axis holds the same stored
    bytes in every file, and to name the first block where it does not; reads exactly the
    referenced ranges, once. `paths`: what refs' `path` indexes (one path: every block is
    in that file). `pread(n, offset)`: reads `paths[0]` (the scanner's open file, which
    serves what its scan has read already from memory), else each file is opened here.
    """
    import hashlib

    from ..storage import open_source

    paths = [paths] if isinstance(paths, str) else list(paths)
    flat = refs.reshape(-1)
    out = np.empty(flat.shape, dtype=BLOCK_DIGEST)
    files: dict[int, object] = {}  # a few open at a time (a VDS may name thousands)
    if pread is not None:
        files[0] = _Reader(pread)
    try:
        for i, (p, off, n) in enumerate(zip(flat["path"].tolist(), flat["offset"].tolist(),
                                            flat["length"].tolist())):
            h = hashlib.blake2b(n.to_bytes(8, "little"), digest_size=16)
            if n:
                f = files.get(p)
                if f is None:
                    if len(files) >= OPEN_FILES:
                        files.pop(next(iter(files))).close()
                    f = files[p] = open_source(paths[p])
                h.update(f.pread(n, off))  # (a memoryview of what the scan read, or bytes)
            out[i] = h.digest()
    finally:
        for f in files.values():
            f.close()
    out = out.reshape(refs.shape)
    return summary(out), out


class _Reader:
    """A `pread` as digest_blocks uses an open file (its caller closes the file)."""

    def __init__(self, pread):
        self.pread = pread

    def close(self) -> None:
        pass


def digest_values(values: np.ndarray, block_shape: tuple[int, ...]) -> tuple[str, np.ndarray]:
    """Per block of `block_shape`, a 16-byte BLAKE2b of the decoded values it holds (native
    byte order, C order), and their summary prefixed "values:" (a variable some of whose
    chunks have no byte range to digest)."""
    import hashlib
    import itertools

    values = np.asarray(values)
    values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("=")) \
        if values.dtype.kind not in "OT" else values
    grid = tuple(-(-n // b) if b else 0 for n, b in zip(values.shape, block_shape))
    out = np.empty(grid, dtype=BLOCK_DIGEST)
    for index in itertools.product(*(range(g) for g in grid)):
        part = values[tuple(slice(i * b, (i + 1) * b) for i, b in zip(index, block_shape))]
        raw = part.tobytes() if part.dtype.kind not in "OT" else repr(part.tolist()).encode()
        out[index] = hashlib.blake2b(raw, digest_size=16).digest()
    return "values:" + summary(out), out


def summary(block_digests: np.ndarray) -> str:
    """One digest of every block's (their grid's shape included)."""
    import hashlib

    h = hashlib.sha256(repr(block_digests.shape).encode())
    h.update(np.ascontiguousarray(block_digests).tobytes())
    return h.hexdigest()


# never opened on a cube's say-so: only when the caller allows them
_SYSTEM = ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/var/run", "/var/log",
           "/var/lib", "/var/spool", "/var/mail", "/usr", "/bin", "/sbin", "/lib", "/lib64",
           "/lib32", "/snap")
_HOME_SECRETS = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".pgpass",
                 ".git-credentials", ".config", ".local/share/keyrings", ".password-store",
                 ".mozilla", ".bash_history", ".python_history")


def system_locations() -> list[str]:
    """System locations and secrets in every home, as named and with symlinks resolved."""
    locs = list(_SYSTEM)
    # /root is a home like any other (containers work there as root): only its secrets are
    # refused, as in every home
    homes = {os.path.expanduser("~"), "/root"}
    for base in ("/home", "/Users"):
        try:
            homes.update(os.path.join(base, d) for d in os.listdir(base))
        except OSError:
            pass
    for home in homes:
        if home and home != "/":
            locs += [os.path.join(home, s) for s in _HOME_SECRETS]
    out = set()
    for loc in locs:
        out.add(os.path.normpath(loc))
        out.add(os.path.realpath(loc))
    return sorted(out)


def inside(real: str, root: str) -> bool:
    """Is the resolved path `real` the resolved directory `root` or within it?"""
    return real == root or real.startswith(root.rstrip("/") + "/")


def system_location(path: str) -> str | None:
    """The system location (`/etc`, `~/.ssh`, ...) `path` lies in, symlinks resolved, or
    None. Nothing there is read on a file's say-so: not through a cube's references, and
    not through a kerchunk reference set given as an input (which would copy it into the
    cube)."""
    real = os.path.realpath(path)
    return next((s for s in _system_cache() if inside(real, s)), None)


@functools.cache
def _system_cache() -> tuple[str, ...]:
    return tuple(system_locations())


def missing_library(path: str, needs: str, extra: str) -> VirtualizeError:
    """A format's optional library is not installed: a located `missing-library` naming
    the extra to install (`needs`: "reading FITS needs astropy")."""
    return VirtualizeError([Problem(Location(path), "missing-library", f"{needs}: {extra}")],
                           f"{path}: {needs} ({extra})")


def not_valid(path: str, message: str, format_name: str) -> VirtualizeError:
    """A file of `format_name` that cannot be read as one: a located `corrupt`."""
    return VirtualizeError([Problem(Location(path), "corrupt", message)],
                           f"{path}: not a valid {format_name} file")
