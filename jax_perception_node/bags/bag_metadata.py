"""
What a rosbag2 bag says of itself: the metadata.yaml of its folder, or the copy in its file.

rosbag2 writes its bag information (compression, files, ``custom_data``) into the folder's
metadata.yaml and also into each storage file: the ``rosbag2`` metadata record of an .mcap,
the ``metadata`` table of a .db3. A file named on its own reads the metadata.yaml beside it
when that lists the file, else the copy inside it. Every reader here answers None where there
is nothing readable; the caller (``bagio``) decides what that means.
"""

import contextlib
from pathlib import Path
import sqlite3

import yaml


def custom_data(reader) -> dict[str, str]:
    """
    Return the bag's rosbag2 ``custom_data`` (its folder's metadata.yaml), values as text.

    A bag file named on its own reads the metadata.yaml beside it when that lists the file,
    so naming a folder's .mcap instead of the folder finds the same record; a bare file
    elsewhere reads the copy rosbag2 writes into the file itself, so a drive copied out of
    its folder keeps its seed.
    """
    custom = getattr(getattr(reader.storage, 'metadata', None), 'custom', None)
    path = Path(reader.path).resolve()      # a link to a folder's .mcap: that folder's record
    if custom is None and path.is_file():
        custom = (file_info(path) or {}).get('custom_data')
    # YAML as written, unchecked by rosbags: keep only a mapping, its values as text.
    return {str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {}


def file_info(path: Path) -> dict | None:
    """Return the bag information of bag file ``path``: its folder's, else its own copy."""
    return sibling_info(path) or embedded_info(path)


def sibling_info(path: Path) -> dict | None:
    """Return the bag information of the metadata.yaml beside bag file ``path`` if it lists it."""
    try:
        info = yaml.safe_load((path.parent / 'metadata.yaml').read_text())
        info = info['rosbag2_bagfile_information']
        if path.name in info.get('relative_file_paths', ()):
            return info
    except (OSError, yaml.YAMLError, TypeError, KeyError, AttributeError):
        pass    # no readable metadata.yaml beside it: a bare file
    return None


def embedded_info(path: Path) -> dict | None:
    """Return the bag information rosbag2 wrote into .mcap or .db3 file ``path``, if any."""
    try:
        if path.suffix == '.mcap':
            from mcap.reader import make_reader     # requirements.txt: run time, not tools
            with open(path, 'rb') as stream:
                text = next((record.metadata.get('serialized_metadata')
                             for record in make_reader(stream).iter_metadata()
                             if record.name == 'rosbag2'), None)
        elif path.suffix == '.db3':
            uri = f'{path.resolve().as_uri()}?mode=ro'
            with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
                row = db.execute('SELECT metadata FROM metadata ORDER BY id DESC').fetchone()
            text = row and row[0]
        else:
            return None
        info = yaml.safe_load(text) if text else None
    except Exception:       # noqa: B902 - any failure here only means: no record to read
        return None
    if isinstance(info, dict) and isinstance(info.get('rosbag2_bagfile_information'), dict):
        info = info['rosbag2_bagfile_information']
    return info if isinstance(info, dict) else None
