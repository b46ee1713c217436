"""Read a ``.safetensors`` file into numpy arrays, without torch or the safetensors package.

The format: an 8-byte little-endian header length, a JSON header mapping each tensor name
to ``dtype``, ``shape`` and ``data_offsets`` (relative to the end of the header), then
the raw little-endian data.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import numpy.typing as npt

from game_memory.onnx.errors import ModelPreparationError

__all__ = ["read_safetensors"]

_MAXIMUM_HEADER = 100 * 1024 * 1024
_DTYPES: dict[str, str] = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}


def read_safetensors(data: bytes) -> dict[str, npt.NDArray[np.generic]]:
    """Parse a whole safetensors file held in memory.

    Returns:
        Tensor name -> array (a read-only view of ``data``; BF16 is widened to float32).

    Raises:
        ModelPreparationError: Stage ``build``, if the header or an offset is malformed.
    """

    def malformed(reason: str) -> ModelPreparationError:
        return ModelPreparationError(f"the safetensors file is malformed: {reason}", stage="build")

    if len(data) < 8:
        raise malformed("it is shorter than its 8-byte header length")
    (header_length,) = struct.unpack("<Q", data[:8])
    if header_length > min(_MAXIMUM_HEADER, len(data) - 8):
        raise malformed(f"its header claims {header_length} bytes")
    try:
        header = json.loads(data[8 : 8 + header_length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise malformed(f"its header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise malformed("its header is not a JSON object")
    body = memoryview(data)[8 + header_length :]
    tensors: dict[str, npt.NDArray[np.generic]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name = entry["dtype"]
            shape = [int(size) for size in entry["shape"]]
            start, end = (int(offset) for offset in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed(f"tensor {name!r} has an incomplete entry") from exc
        if not 0 <= start <= end <= len(body) or any(size < 0 for size in shape):
            raise malformed(f"tensor {name!r} lies outside the file")
        count = math.prod(shape)
        raw = body[start:end]
        if dtype_name == "BF16":
            if len(raw) != count * 2:
                raise malformed(f"tensor {name!r} has {len(raw)} bytes for {shape}")
            halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            tensors[name] = halves.view(np.float32).reshape(shape)
            continue
        dtype = _DTYPES.get(dtype_name)
        if dtype is None:
            raise malformed(f"tensor {name!r} has the unsupported dtype {dtype_name}")
        if len(raw) != count * np.dtype(dtype).itemsize:
            raise malformed(f"tensor {name!r} has {len(raw)} bytes for {dtype_name} {shape}")
        tensors[name] = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return tensors
