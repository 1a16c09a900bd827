"""Where designs are evaluated: local worker processes (the default) or a Ray cluster.

The sweep's graph travels to each worker once (as its text form and constants, rebuilt by
``parse_graph``), not once per design.  A task is (tag, tier, target); a worker answers
(tag, result dict).  Evaluation is deterministic, so every backend and any number of jobs give
the same results; only the order in which they arrive differs, and the sweep puts them back in
design order.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator

from npuc.errors import ExploreError

Payload = tuple  # (graph text, constants dict, quantize, digest)

_STATE: dict[str, tuple[Any, str | None]] = {}  # per worker process: digest -> (graph, quantize)


def _load(payload: Payload) -> tuple[Any, str | None]:
    text, constants, quantize, digest = payload
    if digest not in _STATE:
        from npuc.ir.text import parse_graph

        _STATE.clear()
        _STATE[digest] = (parse_graph(text, constants), quantize)
    return _STATE[digest]


def _init_worker(payload: Payload) -> None:
    import torch

    torch.set_num_threads(1)
    _load(payload)


def run_task(graph, quantize, task) -> tuple:
    """Evaluate one design.  An exception that is not an NpucError is a bug in npuc: the design
    becomes an infeasible row saying so (marked ``internal``, never cached), and the sweep goes on."""
    from npuc.dse.evaluate import SCREEN, infeasible, screen, simulate

    tag, tier, target = task
    try:
        return tag, (screen if tier == SCREEN else simulate)(graph, target, quantize)
    except Exception as e:  # noqa: BLE001 (reported in the row, see the docstring)
        result = infeasible(tier, f"internal error in npuc (please report it): {type(e).__name__}: {e}")
        result["internal"] = True
        return tag, result


def _worker_task(task) -> tuple:
    (graph, quantize), = _STATE.values()
    return run_task(graph, quantize, task)


def _ray_task(payload_ref_holder, digest, task) -> tuple:
    if digest not in _STATE:
        import ray
        import torch

        torch.set_num_threads(1)
        _load(ray.get(payload_ref_holder[0]))
    graph, quantize = _STATE[digest]
    return run_task(graph, quantize, task)


class LocalBackend:
    """``jobs`` worker processes (spawned; 1: in this process)."""

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or os.cpu_count() or 1
        self._pool = None
        self._state = None

    def start(self, payload: Payload) -> None:
        if self.jobs == 1:
            self._state = _load(payload)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker, initargs=(payload,))

    def run(self, tasks: Iterable[tuple]) -> Iterator[tuple]:
        tasks = list(tasks)
        if self._pool is None:
            graph, quantize = self._state
            for t in tasks:
                yield run_task(graph, quantize, t)
            return
        from concurrent.futures import as_completed

        futures = [self._pool.submit(_worker_task, t) for t in tasks]
        try:
            for f in as_completed(futures):
                yield f.result()
        finally:
            for f in futures:
                f.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class RayBackend:
    """Tasks on a Ray cluster: ``address`` of a running one, or None for a local one of ``jobs`` CPUs."""

    name = "ray"

    def __init__(self, jobs: int | None = None, address: str | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ExploreError("--backend ray needs Ray, which is not installed: pip install 'npuc[ray]'") from None
        self.jobs = jobs or os.cpu_count() or 1
        self.address = address
        self._started = False

    def start(self, payload: Payload) -> None:
        import ray

        if not ray.is_initialized():
            opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
            if self.address:
                opts["address"] = self.address
            else:
                opts["num_cpus"] = self.jobs
            # Workers import this very npuc: the driver's import path goes with them.
            import npuc

            root = os.path.dirname(os.path.dirname(os.path.abspath(npuc.__file__)))
            opts["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}}
            ray.init(**opts)
            self._started = True
        self._digest = payload[3]
        self._holder = [ray.put(payload)]  # in a list, so that tasks receive the reference itself
        self._fn = ray.remote(num_cpus=1)(_ray_task)

    def run(self, tasks: Iterable[tuple]) -> Iterator[tuple]:
        import ray

        pending = [self._fn.remote(self._holder, self._digest, t) for t in tasks]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                yield ray.get(done[0])
        finally:
            for ref in pending:
                ray.cancel(ref)

    def close(self) -> None:
        import ray

        if self._started:
            ray.shutdown()
            self._started = False


def make_backend(name: str, jobs: int | None, address: str | None = None):
    if name == "local":
        if address:
            raise ExploreError("--ray-address is for --backend ray")
        return LocalBackend(jobs)
    if name == "ray":
        return RayBackend(jobs, address)
    raise ExploreError(f"unknown backend '{name}': choose local or ray")
