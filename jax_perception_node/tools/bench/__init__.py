"""
Side-by-side benchmarks: ``jax-perception bench [--quick] [--json FILE] [--check] [--device]``.

Everything runs on the same inputs in one run and is reported as ratios, since absolute times
on a shared machine are noisy:

1. Recompile cost (``recompile.py``): LiDAR frames of varying size through the bucketed AOT
   pipeline and through a naive ``jax.jit`` of the same frame function on unpadded input.
2. Pipeline against peers (``pipeline_rows.py``): the JAX pipeline, NumPy, PyTorch and Numba
   peers of the same contract with the same sparse lift (``tools/peers.py``,
   ``tools/numba_peer.py``) and JAX without jit, per cloud size (exact bucket fits and partly
   filled buckets) and camera rig; outputs checked equal before timing (``checks.py``). JAX
   against Numba again in a child process pinned to one CPU.
3-5. End to end through ROS, start-up and memory (``ros.py``, the statistics in
   ``ros_stats.py``; helper processes in ``ros_processes.py``, the in-process probe in
   ``probe.py``); the main rate's overhead is the median of three runs.
6. On the device (``device.py``, ``--device``): the core on ``jax.devices()`` against PyTorch on
   the same device, end to end and device-only, with the stage breakdown.

``report.py`` renders the targets and tables, ``plot.py`` the plot, from the results JSON;
``run.py`` runs it all.
``soak_report.py`` renders the soak runs (``make soak``, ``docs/soak.json``) for
docs/reliability.md.
"""

from .run import render, run_benchmarks

__all__ = ['render', 'run_benchmarks']
