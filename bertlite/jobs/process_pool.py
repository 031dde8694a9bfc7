"""sentence-transformers' multi-process pool for every job: processes that each hold a copy of the job, the input
cut into chunks, each chunk run by one process with one of the job's methods, the results in input order.

On one CPU a pool is not expected to be faster (one process already runs on every core through torch's
threads); it keeps code that starts one running unchanged, and spreads work over several GPUs.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Sequence
from typing import Any

import torch

from bertlite.jobs.inputs import check_count

# A pool as start_pool returns it and sentence-transformers names its parts.
Pool = dict[str, Any]


def start_pool(job: Any, target_devices: Sequence[str] | None = None) -> Pool:
    """Start processes that each run a copy of `job`; CPU processes share the machine's cores (each runs
    os.cpu_count() // (CPU processes) torch threads).

    The job is moved to the CPU first (as sentence-transformers moves it) and copied into every process.

    Args:
        job: the job (it is pickled into each process).
        target_devices: one process per entry ("cuda:0", "cpu", ...); None: every CUDA device, else
            min(4, os.cpu_count()) CPU processes.

    Returns:
        {"input": queue, "output": queue, "processes": [...]}; stop it with stop_pool.
    """
    if target_devices is None:
        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
        target_devices = [f"cuda:{i}" for i in range(cuda)] or ["cpu"] * min(4, os.cpu_count() or 1)
    cpu_processes = sum(torch.device(device).type == "cpu" for device in target_devices)
    threads = max(1, (os.cpu_count() or 1) // max(1, cpu_processes))
    job.to("cpu")
    context = torch.multiprocessing.get_context("spawn")
    pool: Pool = {"input": context.Queue(), "output": context.Queue(), "processes": []}
    try:
        for device in target_devices:
            process = context.Process(
                target=_worker, args=(str(device), threads, job, pool["input"], pool["output"]), daemon=True
            )
            process.start()
            pool["processes"].append(process)
    except BaseException:
        stop_pool(pool)
        raise
    return pool


def stop_pool(pool: Pool) -> None:
    """Stop the processes of a pool start_pool started, and close its queues."""
    for process in pool["processes"]:
        process.terminate()
    for process in pool["processes"]:
        process.join()
        process.close()
    pool["input"].close()
    pool["output"].close()


def run_in_pool(
    job: Any,
    method: str,
    items: Sequence[Any],
    pool: Pool | None,
    devices: Sequence[Any] | None,
    chunk_size: int | None,
    kwargs: dict[str, Any],
) -> list[Any]:
    """`job.<method>(chunk, **kwargs)` of each chunk of `items` in a pool's processes, the results in input order.

    Args:
        job: the job (for a pool started here).
        method: the name of the job's method each process runs on its chunk.
        items: the inputs (non-empty).
        pool: a pool of start_pool's; None: one started for `devices` and stopped after.
        devices: the devices of a pool for this call (pool None).
        chunk_size: items per chunk; None: about 10 chunks per process, at most 5,000 items each, as
            sentence-transformers cuts them.
        kwargs: the method's other arguments (picklable).

    Returns:
        Per chunk, the method's result, in input order.

    Raises:
        ValueError: a chunk_size that is not positive.
        RuntimeError: a process exited while results were due.
        Exception: the first error a chunk raised, raised here.
    """
    check_count("chunk_size", chunk_size, none="about 10 chunks per process", must="a positive integer")
    started = pool is None
    if pool is None:
        pool = start_pool(job, [str(device) for device in devices or []])
    try:
        if chunk_size is None:
            chunk_size = max(1, min(-(-len(items) // len(pool["processes"]) // 10), 5000))
        starts = range(0, len(items), chunk_size)
        for chunk_id, start in enumerate(starts):
            pool["input"].put((chunk_id, method, list(items[start : start + chunk_size]), kwargs))
        results: list[Any] = [None] * len(starts)
        for _ in starts:
            chunk_id, result = _next_result(pool)
            results[chunk_id] = result
    finally:
        if started:
            stop_pool(pool)
    if error := next((r for r in results if isinstance(r, BaseException)), None):
        raise error
    return results


def _worker(device: str, threads: int, job: Any, inputs: Any, outputs: Any) -> None:
    """A pool process: run the chunks of `inputs` on `device`, put (chunk id, result or exception) on
    `outputs`, until stop_pool terminates it."""
    torch.set_num_threads(threads)
    if device != "cpu":
        job.to(device)
    while True:
        chunk_id, method, chunk, kwargs = inputs.get()
        try:
            result = getattr(job, method)(chunk, **kwargs)
        except Exception as e:  # sent back, raised in the caller
            result = e
        outputs.put((chunk_id, result))


def _next_result(pool: Pool) -> tuple[int, Any]:
    """The next (chunk id, result) of a pool's processes.

    Raises:
        RuntimeError: one of them exited (killed, out of memory) while results were due.
    """
    while True:
        try:
            return pool["output"].get(timeout=1.0)
        except queue.Empty:
            for process in pool["processes"]:
                if not process.is_alive():
                    raise RuntimeError(
                        f"a multi-process pool's process exited (exit code {process.exitcode}); stop the pool "
                        "with stop_multi_process_pool and start another"
                    ) from None
