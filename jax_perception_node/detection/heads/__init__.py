"""Heads shipped with the package: factories for ``head.module`` (see ``head.py``)."""
