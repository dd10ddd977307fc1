"""Small helpers of tensorizer's public API (format/FORMAT.md §11.4): byte formatting, memory statistics,
the default device, and `no_init_or_tensor` for building empty models before `load_into_module`.

This module needs torch but not the native extension `tensorizer._C`.

Differences from tensorizer 2.11.1, all deliberate:

* Free memory comes from /proc/meminfo (MemFree, what psutil reports as `free`), so psutil is not a
  dependency; psutil is used only where /proc is missing.
* maxrss is converted from KiB only where getrusage reports KiB (not on macOS, which reports bytes).
* `no_init_or_tensor` saves the functions it replaces when it activates (not at import) and restores
  them only if nobody replaced them meanwhile, so it never undoes someone else's patch.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import threading
from typing import Callable, ContextManager, NamedTuple, Optional, TypeVar, Union

import torch

try:
    import resource
except ImportError:  # Windows
    resource = None

__all__ = [
    "convert_bytes",
    "get_device",
    "GlobalGPUMemoryUsage",
    "TorchGPUMemoryUsage",
    "CPUMemoryUsage",
    "MemoryUsage",
    "get_mem_usage",
    "get_gpu_name",
    "no_init_or_tensor",
]


def convert_bytes(num, decimal=True) -> str:
    """Formats a byte count for humans: ``1.5 KB`` (steps of 1000) or ``1.5 KiB`` (``decimal=False``,
    steps of 1024). The largest unit (PB / PiB) is a cap: larger values stay in it."""
    step = 1000.0 if decimal else 1024.0
    units = ("bytes", "KB", "MB", "GB", "TB", "PB") if decimal else ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
    unit = units[0]
    for unit in units[:-1]:
        if num < step:
            break
        num /= step
    else:
        unit = units[-1]
    return "%3.1f %s" % (num, unit)


def get_device() -> torch.device:
    """``cuda`` when CUDA is available, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _free_ram_bytes() -> int:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemFree:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    try:
        import psutil
    except ImportError:
        return 0
    return psutil.virtual_memory().free


def _maxrss_bytes() -> int:
    if resource is None:
        try:
            import psutil
        except ImportError:
            return 0
        me = psutil.Process()
        return me.memory_info().rss + sum(c.memory_info().rss for c in me.children(True))
    total = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
             + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return total if sys.platform == "darwin" else total << 10


class CPUMemoryUsage(NamedTuple):
    """Host RAM: peak resident set size of this process plus its children, and free RAM, in bytes."""

    maxrss: int
    free: int

    @classmethod
    def now(cls) -> "CPUMemoryUsage":
        return cls(_maxrss_bytes(), _free_ram_bytes())

    def __str__(self):
        return "CPU: (maxrss: {:,}MiB F: {:,}MiB)".format(self.maxrss >> 20, self.free >> 20)


class GlobalGPUMemoryUsage(NamedTuple):
    """One GPU's memory across all processes, in bytes."""

    total: int
    free: int
    used: int

    @classmethod
    def now(cls, device=None) -> Optional["GlobalGPUMemoryUsage"]:
        """A snapshot for `device` (default: the current CUDA device), or None without CUDA."""
        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info(device)
        return cls(total, free, total - free)

    def __str__(self):
        return "GPU: (U: {:,}MiB F: {:,}MiB T: {:,}MiB)".format(self.used >> 20, self.free >> 20, self.total >> 20)


class TorchGPUMemoryUsage(NamedTuple):
    """PyTorch's caching allocator on one GPU: reserved and allocated bytes, current and peak."""

    reserved: int
    reserved_max: int
    used: int
    used_max: int

    @classmethod
    def now(cls, device=None) -> Optional["TorchGPUMemoryUsage"]:
        """A snapshot for `device` (default: the current CUDA device), or None without CUDA."""
        if not torch.cuda.is_available():
            return None
        stats = torch.cuda.memory_stats(device)
        return cls(
            stats.get("reserved_bytes.all.current", 0),
            stats.get("reserved_bytes.all.peak", 0),
            stats.get("allocated_bytes.all.current", 0),
            stats.get("allocated_bytes.all.peak", 0),
        )

    def __str__(self):
        return "TORCH: (R: {:,}MiB/{:,}MiB, A: {:,}MiB/{:,}MiB)".format(
            self.reserved >> 20, self.reserved_max >> 20, self.used >> 20, self.used_max >> 20)


class MemoryUsage(NamedTuple):
    """CPU, whole-GPU and PyTorch memory together; `gpu` and `torch` are None without CUDA."""

    cpu: CPUMemoryUsage
    gpu: Optional[GlobalGPUMemoryUsage]
    torch: Optional[TorchGPUMemoryUsage]

    @classmethod
    def now(cls, device=None) -> "MemoryUsage":
        gpu = torch_usage = None
        try:
            gpu = GlobalGPUMemoryUsage.now(device)
            torch_usage = TorchGPUMemoryUsage.now(device)
        except AssertionError:  # torch built without CUDA support raises this
            pass
        return cls(CPUMemoryUsage.now(), gpu, torch_usage)

    def __str__(self):
        return " ".join(str(part) for part in self if part)


def get_mem_usage() -> str:
    """``str(MemoryUsage.now())``, e.g. ``CPU: (maxrss: 249MiB F: 22,191MiB)``."""
    return str(MemoryUsage.now())


def get_gpu_name() -> str:
    """The current CUDA device's name, or ``"N/A"``."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "N/A"


Model = TypeVar("Model")


def no_init_or_tensor(loading_code: Optional[Callable[..., Model]] = None) -> Union[Model, ContextManager]:
    """Builds modules without initializing their weights.

    Inside, ``torch.nn.Linear``, ``Embedding`` and ``LayerNorm`` skip ``reset_parameters`` and
    ``torch.empty`` allocates on the ``meta`` device, so a model costs no memory and no time until
    its tensors are loaded (``TensorDeserializer.load_into_module``).

    Use it as a context manager (``with no_init_or_tensor(): model = Model(config)``), or pass a
    callable to run it inside and get its result (``no_init_or_tensor(lambda: Model(config))``).
    Anything else raises TypeError.

    Re-entrant, thread-safe and async-safe: the effect is scoped to the calling context (a
    contextvar), and the torch functions are swapped while any context anywhere is active (a
    reference count under a lock); other threads and tasks see torch unchanged.
    """
    if loading_code is None:
        return _no_init_context()
    if callable(loading_code):
        with _no_init_context():
            return loading_code()
    raise TypeError(
        "no_init_or_tensor() expected a callable to evaluate, or None if being used as a context manager;"
        f' got an object of type "{type(loading_code).__name__}" instead.'
    )


# The context's state: whether this context is inside no_init_or_tensor, and, process-wide, how many
# contexts are (the swapped functions stay installed while that count is positive).
_no_init_active: contextvars.ContextVar[bool] = contextvars.ContextVar("tensorizer_no_init_active", default=False)
_no_init_lock = threading.Lock()
_no_init_count = 0
_no_init_saved: list = []  # (owner, attribute name, original, replacement) while installed
_NO_INIT_MODULES = (torch.nn.Linear, torch.nn.Embedding, torch.nn.LayerNorm)


def _skip_when_active(original):
    @functools.wraps(original)
    def reset_parameters(*args, **kwargs):
        if not _no_init_active.get():
            return original(*args, **kwargs)
        return None

    return reset_parameters


def _meta_when_active(original):
    @functools.wraps(original)
    def empty(*args, **kwargs):
        if _no_init_active.get():
            kwargs["device"] = "meta"
        return original(*args, **kwargs)

    return empty


def _install() -> None:
    targets = [(m, "reset_parameters", _skip_when_active) for m in _NO_INIT_MODULES]
    targets.append((torch, "empty", _meta_when_active))
    for owner, name, make in targets:
        original = getattr(owner, name)
        replacement = make(original)
        setattr(owner, name, replacement)
        _no_init_saved.append((owner, name, original, replacement))


def _uninstall() -> None:
    while _no_init_saved:
        owner, name, original, replacement = _no_init_saved.pop()
        # Restore only our own replacement: if someone swapped it meanwhile, theirs stays (ours is
        # inert outside an active context anyway).
        if getattr(owner, name) is replacement:
            setattr(owner, name, original)


@contextlib.contextmanager
def _no_init_context():
    global _no_init_count
    if _no_init_active.get():  # re-entered in the same context: already in effect
        yield
        return
    with _no_init_lock:
        _no_init_count += 1
        if _no_init_count == 1:
            _install()
    token = _no_init_active.set(True)
    try:
        yield
    finally:
        _no_init_active.reset(token)
        with _no_init_lock:
            _no_init_count -= 1
            if _no_init_count == 0:
                _uninstall()
