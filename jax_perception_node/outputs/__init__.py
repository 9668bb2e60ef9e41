"""Output builders: GridMap, objects, markers and pictures as plain fields. No rclpy."""
