"""The ROS 2 node: the only rclpy in the product (node, lifecycle node, serving, health)."""
