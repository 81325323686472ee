"""One set of CPU kernels on every x86-64 CPU with AVX2 and FMA: the same bits on another machine.

numpy, OpenBLAS, TensorFlow's XLA compiler and the libraries XLA calls each pick their floating-point
kernels when the process starts, from the CPU they find (AVX2 or AVX-512, FMA, the core count).  Two
kernels round differently, SGD amplifies a last-bit difference over hundreds of iterations, and the
same job gives other digits on another machine.  :func:`pin` fixes each choice through the variable its
library reads when it loads:

==========================================  ==================================================================
variable                                    what it pins
==========================================  ==================================================================
``OPENBLAS_CORETYPE=Haswell``               OpenBLAS's kernels (PCA covariance, ``eigh``, the projection)
``OPENBLAS_NUM_THREADS=1``                  OpenBLAS splits ``eigh``/``syrk`` by thread: the core count
``NPY_DISABLE_CPU_FEATURES=<AVX-512>``      numpy's AVX-512 loops (SVML ``log1p``/``exp``/``cos``/``**``,
                                            the straggler delay draws): the AVX2 loops every CPU here has
``ONEDNN_MAX_CPU_ISA=AVX2``                 the oneDNN sgemm TensorFlow's Eigen contractions call
                                            (the weight gradients, summed over the batch)
``XLA_FLAGS=--xla_cpu_max_isa=AVX2``        XLA's generated code: no AVX-512 (FMA contraction as on AVX2)
``--xla_cpu_enable_platform_dependent_math  the YNNPACK dots and reductions XLA calls: kernels whose sums
=false``                                    do not depend on the CPU (``YNN_FLAG_CONSISTENT_ARITHMETIC``)
``TF_ENABLE_ONEDNN_OPTS=0``                 TensorFlow's own oneDNN graph rewrites
==========================================  ==================================================================

One choice no variable reaches: Eigen (inside TensorFlow) blocks a matrix product whose sum is longer
than an L1-sized block -- the weight gradients sum over the 1024-sample batch -- by the L1 data cache
size it reads from the CPU, 32 KiB here, 48 KiB on Intel Ice Lake and later and on AMD Zen 5: other
blocks, other partial sums.  :func:`pin_eigen_cache_sizes` writes the reference sizes into Eigen's own
setting once TensorFlow is loaded (``tf_setup.import_tensorflow`` calls it).

The ISA pins are set only on an x86-64 CPU that has AVX2 and FMA (the machines the numbers are
made on); elsewhere they would name kernels the CPU cannot run.  A variable already in the
environment is left alone (and an XLA flag already in ``XLA_FLAGS``), so a user can still choose;
``DYBW_CPU_PINS=0`` sets none of them, and ``DYBW_EIGEN_CACHE_SIZES=l1,l2,l3`` makes Eigen block as on
another CPU (``bench/bench_cpu_drift.py`` measures both).  What stays machine-dependent is the
software: another numpy, OpenBLAS or TensorFlow version has other kernels (docs/figures.md,
"Reproducibility across machines").

``import dybw`` calls :func:`pin` before anything else of dybw is imported, so every entry point
(``run.py``, the MPI ranks, ``python -m dybw.figures``, the tests) is pinned before numpy or TensorFlow
load -- unless the caller imported them first, which :func:`pin` reports in one warning.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import sys
import warnings
from dataclasses import dataclass
from importlib import metadata

OPT_OUT = "DYBW_CPU_PINS"  # "0": set no pin (measuring the unpinned spread, or choosing kernels yourself)
EIGEN_VARIABLE = "DYBW_EIGEN_CACHE_SIZES"  # "l1,l2,l3": the cache sizes Eigen blocks by (default: reference)
XLA_FLAGS = "XLA_FLAGS"
# numpy's dispatch targets above AVX2, by the naming of the installed numpy (2.4 groups them by x86-64 level).
_NUMPY_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"
_NUMPY_AVX512_BEFORE_2_4 = (
    "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
)


@dataclass(frozen=True)
class Pin:
    """One setting: ``variable=value`` (for ``XLA_FLAGS``, one flag appended to it), read by ``library``."""

    variable: str
    value: str
    library: str
    isa: bool  # names an instruction set: set only on a CPU that has AVX2 and FMA

    @property
    def flag_name(self) -> str:
        return self.value.split("=", 1)[0]


def _numpy_avx512_targets() -> str:
    try:
        major, minor = (int(part) for part in metadata.version("numpy").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return _NUMPY_AVX512
    return _NUMPY_AVX512 if (major, minor) >= (2, 4) else _NUMPY_AVX512_BEFORE_2_4


def pins() -> tuple[Pin, ...]:
    """Every pin, in the order :func:`pin` applies them."""
    return (
        Pin("OPENBLAS_CORETYPE", "Haswell", "OpenBLAS", isa=True),
        Pin("OPENBLAS_NUM_THREADS", "1", "OpenBLAS", isa=False),
        Pin("NPY_DISABLE_CPU_FEATURES", _numpy_avx512_targets(), "numpy", isa=True),
        Pin("ONEDNN_MAX_CPU_ISA", "AVX2", "oneDNN", isa=True),
        Pin(XLA_FLAGS, "--xla_cpu_max_isa=AVX2", "XLA", isa=True),
        Pin(XLA_FLAGS, "--xla_cpu_enable_platform_dependent_math=false", "XLA", isa=False),
        Pin("TF_ENABLE_ONEDNN_OPTS", "0", "TensorFlow", isa=False),
    )


def cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags (``/proc/cpuinfo``), or None where they cannot be read without numpy."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def is_reference_cpu(machine: str | None = None, flags: frozenset[str] | None = None) -> bool:
    """An x86-64 CPU with AVX2 and FMA: the kind every pinned kernel runs on."""
    machine = (machine or platform.machine()).lower()
    flags = cpu_flags() if flags is None else flags
    return machine in ("x86_64", "amd64") and flags is not None and {"avx2", "fma"} <= flags


def _has_flag(flags: str, name: str) -> bool:
    return any(token.split("=", 1)[0] == name for token in flags.split())


def pin(environ=None, reference_cpu: bool | None = None) -> list[str]:
    """Set every pin that ``environ`` (default ``os.environ``) does not set already; returns ``var=value``
    of those it set.  Warns once if numpy or TensorFlow was imported before, unpinned."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT, "1").strip() == "0":
        return []
    reference_cpu = is_reference_cpu() if reference_cpu is None else reference_cpu
    applied = []
    for item in pins():
        if item.isa and not reference_cpu:
            continue
        if item.variable == XLA_FLAGS:
            flags = environ.get(XLA_FLAGS, "")
            if _has_flag(flags, item.flag_name):
                continue
            environ[XLA_FLAGS] = f"{flags} {item.value}".strip()
        elif item.variable in environ:
            continue
        else:
            environ[item.variable] = item.value
        applied.append(f"{item.variable}={item.value}")
    late = [name for name in ("numpy", "tensorflow") if name in sys.modules]
    if applied and late and environ is os.environ:
        warnings.warn(
            f"dybw: {' and '.join(late)} were imported before dybw, so their CPU kernels are not pinned and "
            f"results may differ in the last bits from other machines; import dybw first",
            stacklevel=2,
        )
    return applied


# --------------------------------------------------------------------------------------------------
# Eigen's cache sizes: the one choice no variable reaches

# L1, L2, L3 in bytes as Eigen reads them (CPUID) on the reference machine, an AMD EPYC (Zen 3).  Only L1
# decides bits: a product summing over more than about 400 terms (the weight gradients sum over a
# 1024-sample batch) is cut into blocks sized to L1, and a 48 KiB L1 (Intel Ice Lake and later, AMD
# Zen 5) cuts it into 512 + 512 where 32 KiB cuts 344 + 344 + 336: other partial sums, other bits.
EIGEN_CACHE_SIZES = (32 * 1024, 512 * 1024, 256 * 1024 * 1024)
# Eigen::internal::manage_caching_sizes(...)::m_cacheSizes, a function-local static {l1, l2, l3} (int64 each)
# with its C++ initialisation guard; each TensorFlow library that multiplies matrices has its own copy.
_EIGEN_SIZES = b"_ZZN5Eigen8internal20manage_caching_sizesENS_6ActionEPlS2_S2_E12m_cacheSizes"
_EIGEN_GUARD = b"_ZGVZN5Eigen8internal20manage_caching_sizesENS_6ActionEPlS2_S2_E12m_cacheSizes"
_eigen_addresses: dict[str, tuple[int, int] | None] = {}  # per library, found once per process


def _elf_symbols(path: str, names: tuple[bytes, ...]) -> dict[bytes, tuple[int, int]]:
    """``{name: (value, size)}`` of the named symbols in a 64-bit little-endian ELF file's symbol tables."""
    import numpy as np

    entry = np.dtype(
        [("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")]
    )
    found: dict[bytes, tuple[int, int]] = {}
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as image:
        if image[:6] != b"\x7fELF\x02\x01":
            return found
        shoff, _, _, _, _, shentsize, shnum = struct.unpack_from("<QIHHHHH", image, 0x28)
        sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
        for _, kind, _, _, offset, size, link, _, _, entsize in sections:
            if kind not in (2, 11) or entsize != entry.itemsize:  # SHT_SYMTAB, SHT_DYNSYM
                continue
            strings_at, strings_end = sections[link][4], sections[link][4] + sections[link][5]
            symbol_names = None
            for name in names:
                # Where the name starts in the string table (a name may also end a longer one).
                starts, at = [], image.find(name + b"\0", strings_at, strings_end)
                while at != -1:
                    starts.append(at - strings_at)
                    at = image.find(name + b"\0", at + 1, strings_end)
                if not starts:
                    continue
                if symbol_names is None:  # a copy: no view may outlive the mapping
                    symbol_names = np.frombuffer(image, entry, size // entsize, offset)["name"].copy()
                hits = np.flatnonzero(np.isin(symbol_names, starts))
                for index in hits:
                    value, length = struct.unpack_from("<QQ", image, offset + int(index) * entsize + 8)
                    if value:
                        found[name] = (value, length)
                        break
    return found


def _load_base(path: str) -> int | None:
    """Where ``path`` is mapped in this process (its first segment, file offset 0)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == path and int(fields[2], 16) == 0:
                return int(fields[0].split("-")[0], 16)
    return None


def _eigen_statics() -> dict[str, tuple[int, int]]:
    """``{library: (address of the sizes, address of the guard)}`` for each loaded TensorFlow library whose
    symbol table names Eigen's static with the expected sizes (3 x int64, an 8-byte guard)."""
    found = {}
    for path in _loaded_libraries("tensorflow"):
        if path not in _eigen_addresses:
            try:
                symbols = _elf_symbols(path, (_EIGEN_SIZES, _EIGEN_GUARD))
                base = _load_base(path)
            except (OSError, ValueError, struct.error):
                symbols, base = {}, None
            sizes, guard = symbols.get(_EIGEN_SIZES), symbols.get(_EIGEN_GUARD)
            usable = base is not None and sizes and guard and sizes[1] == 24 and guard[1] == 8
            _eigen_addresses[path] = (base + sizes[0], base + guard[0]) if usable else None
        if _eigen_addresses[path] is not None:
            found[path] = _eigen_addresses[path]
    return found


def pinned_eigen_sizes() -> tuple[int, int, int] | None:
    """The sizes :func:`pin_eigen_cache_sizes` writes: ``DYBW_EIGEN_CACHE_SIZES=l1,l2,l3`` if set (to
    reproduce another machine's blocking, even with ``DYBW_CPU_PINS=0``), else the reference machine's;
    None when nothing is pinned."""
    given = os.environ.get(EIGEN_VARIABLE, "").strip()
    if given:
        try:
            l1, l2, l3 = (int(part) for part in given.split(","))
        except ValueError:
            raise ValueError(f"{EIGEN_VARIABLE}={given!r}: expected three byte counts l1,l2,l3") from None
        return l1, l2, l3
    return None if os.environ.get(OPT_OUT, "1").strip() == "0" else EIGEN_CACHE_SIZES


def pin_eigen_cache_sizes(sizes: tuple[int, int, int] | None = None) -> list[str]:
    """Make Eigen's matrix products in the loaded TensorFlow libraries block as with ``sizes`` (L1, L2, L3;
    default :func:`pinned_eigen_sizes`).

    What ``Eigen::setCpuCacheSizes`` does, which TensorFlow does not expose: the sizes are written into
    Eigen's static in each library, found by name in the library's symbol table, once it is checked to
    be either not yet initialised or to hold cache sizes; marked initialised, Eigen never overwrites
    them with the CPU's.  Returns the libraries pinned.
    """
    sizes = pinned_eigen_sizes() if sizes is None else sizes
    if sizes is None:
        return []
    pinned = []
    for path, (at, guard_at) in _eigen_statics().items():
        values = (ctypes.c_int64 * 3).from_address(at)
        guard = ctypes.c_uint8.from_address(guard_at)
        if guard.value and not (1024 <= values[0] <= values[1] <= values[2] <= 1 << 40):
            continue  # not what Eigen writes there: another layout, leave it alone
        values[:] = sizes
        guard.value = 1
        pinned.append(path)
    return pinned


def eigen_cache_sizes() -> dict[str, tuple[int, ...]]:
    """``{library: (l1, l2, l3)}`` Eigen blocks by in each loaded TensorFlow library ((0, 0, 0): not yet
    initialised, the CPU's sizes will be read at the first product)."""
    return {path: tuple((ctypes.c_int64 * 3).from_address(at)) for path, (at, _) in _eigen_statics().items()}


# --------------------------------------------------------------------------------------------------
# What is in effect in this process (for the preprocessing cache key, the tests and the benchmark)


def _loaded_libraries(fragment: str) -> list[str]:
    """Paths of the shared libraries this process has loaded whose name contains ``fragment`` (Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if fragment in line.rsplit("/", 1)[-1]}
    except OSError:
        return []
    return sorted(path for path in paths if path.startswith("/"))


def _openblas_call(library, names: tuple[str, ...], restype):
    for prefix in ("", "scipy_"):
        for name in names:
            for suffix in ("", "64_", "_64_"):
                function = getattr(library, f"{prefix}{name}{suffix}", None)
                if function is not None:
                    function.restype = restype
                    return function()
    return None


def openblas() -> dict | None:
    """The OpenBLAS numpy uses, as it runs: kernel set (core name), threads and build; None if not found."""
    import numpy  # noqa: F401 - loads numpy's OpenBLAS

    for path in _loaded_libraries("openblas"):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        core = _openblas_call(library, ("openblas_get_corename",), ctypes.c_char_p)
        if core is None:
            continue
        threads = _openblas_call(library, ("openblas_get_num_threads",), ctypes.c_int)
        config = _openblas_call(library, ("openblas_get_config",), ctypes.c_char_p)
        return {"core": core.decode(), "threads": threads, "config": (config or b"").decode().strip()}
    return None


def numpy_targets() -> dict[str, str]:
    """The SIMD target numpy runs for the float64 functions the delay draws use (``current`` dispatch)."""
    try:
        from numpy.lib.introspect import opt_func_info
    except ImportError:  # numpy < 2.0
        return {}
    info = {}
    for name in ("exp", "log1p", "cos", "power"):
        for targets in opt_func_info(func_name=f"^{name}$", signature="float64").get(name, {}).values():
            info[name] = targets["current"]
    return info


def blas_fingerprint() -> str:
    """What decides the bits of a numpy/LAPACK result here: numpy's version and OpenBLAS's build, kernels
    and threads.  Keys the preprocessing cache, so a transform made with other kernels is never reused."""
    import numpy

    blas = openblas()
    described = f"{blas['config']}|{blas['core']}|{blas['threads']}" if blas else "blas-unknown"
    return f"numpy {numpy.__version__}|{described}"


def status() -> dict:
    """The pins and what the libraries run with, in this process: a record for tests and benchmarks."""
    return {
        "reference_cpu": is_reference_cpu(),
        "environment": {
            variable: os.environ.get(variable) for variable in dict.fromkeys(item.variable for item in pins())
        },
        "openblas": openblas(),
        "numpy": numpy_targets(),
        "eigen": {os.path.basename(path): list(sizes) for path, sizes in eigen_cache_sizes().items()}
        if "tensorflow" in sys.modules
        else None,
    }
