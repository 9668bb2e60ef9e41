"""Image encoders shipped with the package: factories for ``encoder.module`` (``encoder.py``)."""
