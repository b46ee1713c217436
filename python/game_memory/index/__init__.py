"""The derived vector index: its protocol, the file index, joins to snapshots, legacy import.

Derived data only: it may be deleted at any time and rebuilt from the save; a damaged
index raises ``DerivedIndexError`` and never touches the save.
"""
