"""A Slurm task's signal handling in a real process (tests/cluster runs it under a real Slurm): what a
signal does to a task whose job has returned, while it winds down."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

# The task enters and leaves dybw's Task as a submitit job does, then blocks in ``pause()`` at the very end
# of the interpreter's shutdown (a C exit function, after Python has reset its signal handlers), where a
# real task tears down MPI and TensorFlow.
WINDING_DOWN = textwrap.dedent(
    """
    import ctypes, sys
    from pathlib import Path
    from dybw.slurm import JobFiles, Task

    with Task(JobFiles(Path(sys.argv[1]), None, ""), rank=0, tasks=1):
        pass  # the job ran and returned
    libc = ctypes.CDLL(None)
    ctypes.pythonapi.Py_AtExit(ctypes.c_void_p(ctypes.cast(libc.pause, ctypes.c_void_p).value))
    print("returned", flush=True)
    """
)


def test_the_time_limit_signal_does_not_kill_a_task_winding_down_after_its_job_returned(tmp_path):
    task = subprocess.Popen([sys.executable, "-c", WINDING_DOWN, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert task.stdout.readline() == "returned\n"
        time.sleep(0.5)  # into pause(), past the interpreter's shutdown
        task.send_signal(signal.SIGUSR2)  # Slurm's signal_delay_s before the limit
        time.sleep(1.0)
        # Killed by it, Slurm would record FAILED for a job that completed.
        assert task.poll() is None, f"the task died of SIGUSR2 (exit {task.returncode})"
        # SIGTERM still ends it (the default action once Python is gone); sent again until it does, as a
        # loaded machine may not have let the task reach pause() yet, where Python's own handler takes it.
        for _ in range(60):
            task.send_signal(signal.SIGTERM)
            try:
                assert task.wait(timeout=0.5) == -signal.SIGTERM
                break
            except subprocess.TimeoutExpired:
                continue
        assert task.poll() == -signal.SIGTERM
    finally:
        task.kill()
        task.wait()
