"""Running scans: bounded worker processes (`workers.py`), executors (`executors.py`), and
the caller's shared copy of the inventories they return (`share.py`)."""
