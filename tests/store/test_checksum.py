"""The save's CRC-32 (``durable/checksum.py``) is zlib's, value for value: every file
written before it (or by a build without zlib-ng) reads the same."""

from __future__ import annotations

import random
import zlib

from game_memory.durable.checksum import crc32


def test_the_crc_is_zlibs_for_every_length_start_value_and_buffer_kind() -> None:
    rng = random.Random(7)
    for length in [*range(0, 70), 127, 128, 129, 4095, 4096, 65_537, 1 << 20]:
        data = rng.randbytes(length)
        start = rng.getrandbits(32)
        assert crc32(data) == zlib.crc32(data)
        assert crc32(data, start) == zlib.crc32(data, start)
        assert crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])
        assert crc32(bytearray(data), start) == zlib.crc32(data, start)
    # Chained over pieces, as the stores check growing files.
    whole = rng.randbytes(10_000)
    value = 0
    for at in range(0, len(whole), 333):
        value = crc32(whole[at : at + 333], value)
    assert value == zlib.crc32(whole)
