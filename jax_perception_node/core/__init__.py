"""The core: JAX kernels, buckets, host staging, the pipeline and its executable store. No ROS."""
