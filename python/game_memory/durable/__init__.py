"""Durable file primitives shared by the save and the derived index.

Atomic and appending writes with ``fsync`` (folders included), reads that refuse symbolic
links and non-regular files, the cross-process writer lock, and the hashed names of
sessions and owners on disk. Nothing here knows what a memory is.
"""
