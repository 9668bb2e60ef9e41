"""Geometry: rotations, the TF buffer, stamps and odometry. NumPy only, no ROS, no JAX."""
