"""
Camera images taken on a small thread pool: cameras decode at once, each camera's in order.

A JPEG camera costs a few milliseconds of host decode (six 1600 x 900 images about 14 ms on one
core of this project's 2-core CPU); libjpeg and NumPy release the GIL, so the cameras decode
side by side while the ROS executor thread goes on taking messages. Each camera has at most one
message in its decode: the next one waits in the caller until it is done, so a camera's images
reach its buffer in arrival order, and a camera that decodes slower than it sends holds the
caller back as one slow thread would (its subscription's queue then drops the oldest, as before).
A call whose key (the image's stamp) is the one in the camera's decode is skipped without a
wait: image_transport's raw and compressed copies of one image, back to back, would otherwise
hold the caller for the first copy's whole decode, camera after camera. No ROS import.
"""

from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
import os
import threading
from typing import Callable


def cpu_threads() -> int:
    """Return the CPUs this process may run on, at least 2 (decode beside the executor)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    return max(2, count or 2)


class CameraDecodePool:
    """
    Run each camera's ``take`` calls on a pool: several cameras at once, one call per camera.

    ``threads``: the pool's size (``cpu_threads()`` by default); more cameras than threads
    queue for a thread. A ``take`` handles its own errors (counting, logging); anything it
    still raises comes out of the next ``submit`` for that camera, as a callback's exception
    would from a spinning executor (``wait`` only waits), once that next call is on its way:
    one failed call never stops a camera's later ones. One camera's ``submit`` calls come from
    one thread at a time (a ROS executor's mutually exclusive callbacks): two at once could
    both pass the wait and overlap.
    """

    def __init__(self, threads: int | None = None):
        self._pool = ThreadPoolExecutor(threads or cpu_threads(),
                                        thread_name_prefix='camera_decode')
        self._lock = threading.Lock()
        self._running: dict[str, tuple[Future, object]] = {}   # camera -> newest call, key

    def submit(self, name: str, take: Callable[[], object], key: object = None) -> bool:
        """
        Run ``take()`` on the pool once camera ``name``'s previous call is done (waits).

        Returns False, at once and without running ``take``, when ``key`` is not None and
        equals (``==``) the key of the camera's previous call while that is still running (a
        second copy of the same image: the key is its stamp); once it is done, the copy runs
        (and may be the one taken if the first was refused).
        """
        with self._lock:
            previous, previous_key = self._running.get(name, (None, None))
        if key is not None and key == previous_key and not previous.done():
            return False
        try:
            if previous is not None:
                previous.result()
        finally:
            future = self._pool.submit(take)
            with self._lock:
                self._running[name] = (future, key)
        return True

    def wait(self) -> None:
        """Return once every call submitted so far is done (a frame pairs what arrived)."""
        with self._lock:
            running = [future for future, _ in self._running.values()]
        futures.wait(running)

    def close(self) -> None:
        """Finish the calls submitted and stop the threads."""
        self._pool.shutdown(wait=True)
