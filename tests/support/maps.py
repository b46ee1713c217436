"""What this process maps where (Linux ``/proc/self/smaps``): whether an array's rows are a
map of a file, and how much of a map is resident."""

from __future__ import annotations

from typing import Any

__all__ = ["mapped_file", "resident_bytes"]


def _entry(address: int) -> tuple[str, int]:
    """The path (``""`` if anonymous) and resident bytes of the map holding ``address``."""
    inside, path = False, ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            head = parts[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(part, 16) for part in head.split("-"))
                inside = low <= address < high
                path = parts[5] if len(parts) > 5 else ""
            elif inside and head == "Rss:":
                return path, int(parts[1]) * 1024
    raise AssertionError(f"no map holds {address:#x}")


def mapped_file(array: Any) -> str:
    """The file whose map holds ``array``'s first byte (``""`` or a name in brackets such as
    ``[heap]``: anonymous memory)."""
    return _entry(int(array.ctypes.data))[0]


def resident_bytes(array: Any) -> int:
    """Bytes of the map holding ``array``'s first byte resident in this process."""
    return _entry(int(array.ctypes.data))[1]
