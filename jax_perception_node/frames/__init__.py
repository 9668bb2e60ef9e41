"""The one frame path: pairing, pipeline call, picture and latency record. No ROS."""
