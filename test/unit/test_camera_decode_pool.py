"""CameraDecodePool: cameras at once, one call per camera at a time, wait, errors."""

import threading

from jax_perception_node.frames.camera_decode_pool import CameraDecodePool, cpu_threads
import pytest


def test_a_camera_waits_for_its_previous_call_and_wait_waits_for_all():
    pool = CameraDecodePool(2)
    release, order = threading.Event(), []
    try:
        pool.submit('front', lambda: (release.wait(5.0), order.append('front 1')))
        pool.submit('rear', lambda: order.append('rear 1'))     # not held up by front
        second = threading.Thread(target=pool.submit,
                                  args=('front', lambda: order.append('front 2')))
        second.start()
        second.join(0.3)
        assert second.is_alive()        # front's second call waits for its first
        assert order == ['rear 1']
        release.set()
        second.join(5.0)
        pool.wait()
        assert order == ['rear 1', 'front 1', 'front 2']
    finally:
        release.set()
        pool.close()


def test_a_calls_error_comes_out_of_the_cameras_next_submit_not_out_of_wait():
    pool = CameraDecodePool(2)
    try:
        pool.submit('front', lambda: 1 / 0)
        pool.wait()                         # only waits
        pool.submit('rear', lambda: None)   # another camera's call is not its business
        taken = []
        with pytest.raises(ZeroDivisionError):
            pool.submit('front', lambda: taken.append(2))
        # The call after the failed one still ran, and the camera goes on: nothing re-raised.
        pool.submit('front', lambda: taken.append(3))
        pool.wait()
        assert taken == [2, 3]
    finally:
        pool.close()


@pytest.mark.parametrize('cpus, threads', [(1, 2), (2, 2), (8, 8)])
def test_a_thread_per_cpu_of_the_process_and_at_least_two(monkeypatch, cpus, threads):
    monkeypatch.setattr('os.sched_getaffinity', lambda pid: set(range(cpus)), raising=False)
    assert cpu_threads() == threads


def test_a_second_copy_of_the_image_in_decode_is_skipped_without_a_wait():
    # image_transport's raw and compressed copies of one image arrive back to back: waiting
    # for the first copy's decode held the executor thread, camera after camera.
    pool = CameraDecodePool(2)
    release, taken = threading.Event(), []
    try:
        assert pool.submit('front', lambda: (release.wait(5.0), taken.append('raw')), key=7)
        copy = threading.Thread(target=lambda: taken.append(
            pool.submit('front', lambda: taken.append('compressed'), key=7)))
        copy.start()
        copy.join(1.0)
        assert not copy.is_alive()          # no wait
        assert taken == [False]             # and not run
        release.set()
        pool.wait()
        # Once the first copy is done, a copy runs (the first may have been refused); the
        # camera's next image is not a copy.
        assert pool.submit('front', lambda: taken.append('copy after'), key=7)
        assert pool.submit('front', lambda: taken.append('next'), key=8)
        pool.wait()
        assert taken == [False, 'raw', 'copy after', 'next']
    finally:
        release.set()
        pool.close()
