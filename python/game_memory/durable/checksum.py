"""The CRC-32 every file of a save and of its index is checked with: one function, fast.

The value is zlib's CRC-32 (the same polynomial and start value, so every file written
before reads the same), computed by zlib-ng, which uses the processor's carry-less
multiply instructions: about 30 GB/s against zlib's 2.5-5 GB/s here, and a third of
zlib's cost per call on a record of 128 bytes. That is what decides the first open of a
copied save, whose derived files are checked by content once (a 10k save: 4 MB of
records, 2 MB of read file, 1.3 MB of index entries). Where zlib-ng has no wheel, zlib
gives the same values, slower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["crc32"]

if TYPE_CHECKING:
    from zlib import crc32
else:
    try:
        from zlib_ng.zlib_ng import crc32
    except ImportError:  # a platform without a zlib-ng wheel: the same values, slower
        from zlib import crc32
