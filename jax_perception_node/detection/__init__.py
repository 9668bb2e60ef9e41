"""Detection: the head plug-in, its box layout, evaluation and the shipped heads. No ROS."""
