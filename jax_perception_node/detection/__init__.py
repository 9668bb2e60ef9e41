"""Detection: the head and image encoder plug-ins, box layout, evaluation, what ships. No ROS."""
