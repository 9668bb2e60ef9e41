"""
The tools around the node: benchmarks, peers, sample drive, demo, player/recorder, reports.

Tools import the product (the ``jax_perception_node`` package root and its modules), never the
reverse; the node's install requirements hold none of their libraries (matplotlib, psutil,
torch, scipy, ray: the ``tools``, ``bench`` and ``fleet`` extras).
"""
