"""Sensor messages decoded: PointCloud2 rows, camera feature maps and CameraInfo. No ROS."""
