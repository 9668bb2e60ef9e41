"""The node's frame thread: one per activation, each stopped by an event of its own."""

import threading
from typing import Callable

JOIN_S = 10.0       # stop() waits this long for the frame in progress


class FrameWorker:
    """
    Run ``serve(stop)`` on a daemon thread; ``serve`` returns once its event ``stop`` is set.

    Each worker has its own event: a worker still in a frame when :meth:`stop` gives up
    waiting ends after that frame, on its own event, and never serves beside the next
    activation's worker.
    """

    def __init__(self, serve: Callable[[threading.Event], None]):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=serve, args=(self._stop,), name='bev_worker',
                                        daemon=True)
        self._thread.start()

    def stop(self, log) -> None:
        """Set the event and wait up to :data:`JOIN_S` for the frame in progress, else log."""
        self._stop.set()
        self._thread.join(timeout=JOIN_S)
        if self._thread.is_alive():
            log.error(f'the frame worker did not stop within {JOIN_S:g} s; it ends after its '
                      'frame')
