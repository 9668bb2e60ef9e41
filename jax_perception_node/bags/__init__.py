"""Bags: rosbag2 reading and writing through rosbags, and offline replay. No rclpy."""
