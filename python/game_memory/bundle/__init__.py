"""Shipping game-memory inside a game: the frozen sidecar bundle and the addon archive.

``build.build_bundle`` freezes ``game-memory serve`` with PyInstaller into one folder that
runs with no Python installed, puts the embedding model inside it and checks it by starting
it once; ``addon_archive.write_addon_archive`` writes the addon's Asset Library zip;
``layout`` holds what the builder and the frozen sidecar must agree on (folder names, the
bundle manifest). The command line (``game-memory bundle``, ``game-memory addon``) is in
``game_memory.cli``. Nothing is re-exported here, so the frozen sidecar, which needs only
``layout``, does not import the builder.
"""

__all__: list[str] = []
