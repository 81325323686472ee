"""MPICH's shared-memory segments that a killed MPI world left behind: found and removed.

MPICH (ch4, POSIX shared memory) names each world's node-local segment after its PMI key-value space
(``/dev/shm/mpich_shm_<world id>_<node>``, and ``mpich_vci_...``), the first rank to open it creating it,
and unlinks it in ``MPI_Finalize``.  A world that is killed or aborted leaves it behind.  Under Slurm the
key-value space is the job and step id, so a **requeued job** -- the same job and step again -- finds its
first attempt's segment, attaches to it as if another rank had created it, and fails in ``MPI_Init``
("Message from rank 1 ... truncated", or UCX's "Destination is unreachable").  Removing the segments no
running process maps, before MPI starts, prevents that; it also frees their memory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIXES = ("mpich_shm_", "mpich_vci_")
# A segment younger than this may be one a rank has just created and not mapped yet.
MIN_AGE_S = 5.0


def _mapped(shm_dir: Path) -> set[str]:
    """Every path in ``shm_dir`` some process (that we may inspect) has mapped."""
    paths = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # gone, or another user's
            continue
        for line in text.splitlines():
            at = line.find(f"{shm_dir}/")
            if at >= 0:
                paths.add(line[at:].removesuffix(" (deleted)"))
    return paths


def stale_segments(shm_dir: Path = SHM_DIR, min_age_s: float = MIN_AGE_S) -> list[Path]:
    """MPICH segments of ours that no process maps and that are older than ``min_age_s``."""
    try:
        candidates = [p for p in shm_dir.iterdir() if p.name.startswith(PREFIXES)]
    except OSError:
        return []
    now, uid = time.time(), os.getuid()
    owned = []
    for path in candidates:
        try:
            stat = path.stat()
        except OSError:
            continue
        if stat.st_uid == uid and now - stat.st_mtime >= min_age_s:
            owned.append(path)
    if not owned:
        return []
    mapped = _mapped(shm_dir)
    return [path for path in owned if str(path) not in mapped]


def remove_stale_segments(shm_dir: Path = SHM_DIR, min_age_s: float = MIN_AGE_S) -> list[str]:
    """Unlink :func:`stale_segments`; returns their names (a segment another process removed first is
    not an error)."""
    removed = []
    for path in stale_segments(shm_dir, min_age_s):
        try:
            path.unlink()
        except OSError:  # removed by another process meanwhile
            continue
        removed.append(path.name)
    return removed
