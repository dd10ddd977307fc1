"""Linux syscalls through ctypes, as tensorizer 2.11.1's ``tensorizer._syscalls`` offers them.

Our engine makes these calls natively; this module keeps 2.11.1's helpers (and the names tests and
user code patch, such as ``_fallocate``) for code written against it:

* ``has_fallocate()``: whether libc has ``fallocate(2)``;
* ``try_fallocate(fd, offset, length, suppress_all_errors=False)``: reserve a byte range; False
  when unavailable or unsupported by the file system (EOPNOTSUPP), OSError for other failures
  unless `suppress_all_errors`;
* ``prefault(address, length)``: fault in a writable mapping, with ``MADV_POPULATE_WRITE`` where
  the kernel has it (5.14+), else by zeroing it (so only for memory about to be overwritten).
"""

import ctypes
import errno
import mmap

__all__ = ("has_fallocate", "try_fallocate", "prefault")

try:
    _libc = ctypes.CDLL(None)
except TypeError:  # no dlopen(NULL) on this platform: the interpreter's own symbols
    _libc = ctypes.pythonapi

_IN: int = 1  # ctypes paramflags direction: input parameter
_madv_populate_write: int = 23  # MADV_POPULATE_WRITE (linux/mman.h)


def _errcheck(result, func, args) -> None:
    """ctypes errcheck: -1 becomes OSError(errno), 0 is success."""
    del func, args
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, errno.errorcode.get(err, "Unknown error"))
    if result != 0:
        raise OSError("Unknown return code")


def _bind(name: str, argtypes: tuple, argnames: tuple):
    """libc's `name` with keyword parameters and _errcheck, or None where libc lacks it."""
    prototype = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes, use_errno=True)
    try:
        func = prototype((name, _libc), tuple((_IN, n) for n in argnames))
    except AttributeError:
        return None
    func.errcheck = _errcheck
    return func


_fallocate = _bind("fallocate", (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong),
                   ("fd", "mode", "offset", "len"))
_madvise = _bind("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ("addr", "length", "advice"))


def has_fallocate() -> bool:
    """Whether the ``fallocate(2)`` syscall is available."""
    return _fallocate is not None


def try_fallocate(fd: int, offset: int, length: int, suppress_all_errors: bool = False) -> bool:
    """``fallocate(fd, 0, offset, length)``: True on success, False when unavailable or (always
    ignored) EOPNOTSUPP; other errors raise OSError unless `suppress_all_errors`."""
    if _fallocate is None:
        return False
    try:
        _fallocate(fd=fd, mode=0, offset=offset, len=length)
        return True
    except OSError as e:
        if suppress_all_errors or e.errno == errno.EOPNOTSUPP:
            return False
        raise


def _can_prefault_with_madvise() -> bool:
    """Whether MADV_POPULATE_WRITE works here (tried on one private anonymous page). Not through
    ctypes.pythonapi, whose calls would hold the GIL."""
    if _madvise is None or _libc is ctypes.pythonapi:
        return False
    flags = getattr(mmap, "MAP_PRIVATE", 0)
    with mmap.mmap(-1, mmap.PAGESIZE, **({"flags": flags} if flags else {})) as page:
        buffer = (ctypes.c_ubyte * mmap.PAGESIZE).from_buffer(page)
        try:
            _madvise(ctypes.byref(buffer), mmap.PAGESIZE, _madv_populate_write)
            return True
        except OSError:
            return False
        finally:
            del buffer  # release the export so the mapping can close


if _can_prefault_with_madvise():

    def prefault(address, length: int):
        """Faults in [address, address + length) for writing without touching its contents."""
        _madvise(address, length, _madv_populate_write)

else:

    def prefault(address, length: int):
        """Faults in [address, address + length) by zeroing it (no MADV_POPULATE_WRITE here)."""
        ctypes.memset(address, 0x00, length)

del _can_prefault_with_madvise
