"""File access shared by the scanners: byte counting and format sniffing."""

from __future__ import annotations

import functools
import io
import os

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class CountingFile(io.FileIO):
    """A read-only file that counts the bytes handed out (the scan's I/O cost)."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(os.fspath(path), "rb")
        self.bytes_read = 0

    def readinto(self, b):  # type: ignore[override]
        n = super().readinto(b)
        self.bytes_read += n or 0
        return n

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        data = super().read(size)
        self.bytes_read += len(data or b"")
        return data


def sniff(head: bytes) -> str | None:
    """The format of a file from its first bytes: 'hdf5', 'netcdf3', 'tiff' or None.

    HDF5 allows a user block before the signature, at 512, 1024, 2048, ... bytes; callers
    that see None for a file with a user block get 'hdf5' from `find_hdf5_signature`.
    """
    if head.startswith(HDF5_SIGNATURE):
        return "hdf5"
    if head[:3] == b"CDF" and len(head) > 3 and head[3] in (1, 2, 5):
        return "netcdf3"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    return None


def find_hdf5_signature(f) -> bool:
    """True when an HDF5 superblock signature sits at 512 * 2**k bytes (a user block)."""
    from ..storage import file_size

    size = file_size(f)
    pos = 512
    while pos + 8 <= size:
        f.seek(pos)
        if f.read(8) == HDF5_SIGNATURE:
            return True
        pos *= 2
    return False


def digest_blocks(paths: str | list[str], refs) -> str:
    """SHA-256 over the stored bytes of every referenced block, in manifest order.

    Used to check that a variable without the concatenation axis holds the same stored
    bytes in every file; reads exactly the referenced ranges. `paths`: what refs' `path`
    indexes (one path: every block is in that file).
    """
    import contextlib
    import hashlib

    from ..storage import open_source

    paths = [paths] if isinstance(paths, str) else list(paths)
    h = hashlib.sha256()
    flat = refs.reshape(-1)
    with contextlib.ExitStack() as stack:
        files: dict[int, object] = {}
        for p, off, n in zip(flat["path"].tolist(), flat["offset"].tolist(),
                             flat["length"].tolist()):
            h.update(n.to_bytes(8, "little"))
            if n:
                f = files.get(p)
                if f is None:
                    f = files[p] = stack.enter_context(open_source(paths[p]))
                h.update(f.pread(n, off))
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


def system_location(path: str) -> str | None:
    """The system location (`/etc`, `~/.ssh`, ...) `path` lies in, symlinks resolved, or
    None. Nothing there is read on a file's say-so: not through a cube's references, and
    not through a kerchunk reference set given as an input (which would copy it into the
    cube)."""
    real = os.path.realpath(path)
    return next((s for s in _system_cache() if real == s or real.startswith(s.rstrip('/') + '/')),
                None)


@functools.cache
def _system_cache() -> tuple[str, ...]:
    return tuple(system_locations())
