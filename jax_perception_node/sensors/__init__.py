"""Sensor messages decoded: PointCloud2 rows, camera feature maps, images, CameraInfo. No ROS."""
