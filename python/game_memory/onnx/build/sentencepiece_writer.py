"""Write a SentencePiece unigram ``ModelProto`` from pieces and scores, byte for byte.

The protobuf wire format is written by hand (a dozen fields) rather than through
sentencepiece's generated ``sentencepiece_model_pb2``, whose import depends on the installed
protobuf runtime; the bytes depend only on the pieces, so builds are deterministic.

The model is meant for :class:`~game_memory.onnx.xlmr_tokenizer.XlmRobertaTokenizer` with
an external normalizer: SentencePiece's own normalizer is ``identity`` with no dummy prefix
and no whitespace clean-up (the caller's normalizer does all of that), spaces become
``▁``, and piece ids are the model's ids (no fairseq offset).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["PIECE_NORMAL", "PIECE_UNKNOWN", "unigram_model_bytes"]

#: ``SentencePiece.Type`` values.
PIECE_NORMAL, PIECE_UNKNOWN = 1, 2
_UNIGRAM = 1
_VARINT, _FIXED32, _LENGTH = 0, 5, 2


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32 fields are sent as 64-bit two's complement
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _integer(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value)


def _message(field: int, payload: bytes) -> bytes:
    return _key(field, _LENGTH) + _varint(len(payload)) + payload


def unigram_model_bytes(
    pieces: Sequence[str], scores: Sequence[float], types: Sequence[int], unk_id: int
) -> bytes:
    """Serialize a unigram model whose id ``i`` is ``pieces[i]``.

    Args:
        pieces: Every piece, in id order.
        scores: Their log-probabilities (as float32).
        types: ``PIECE_NORMAL`` or ``PIECE_UNKNOWN`` per piece.
        unk_id: The id of the one ``PIECE_UNKNOWN`` piece.

    Raises:
        ValueError: The sequences differ in length, or ``unk_id`` is not the only
            unknown piece.
    """
    if not len(pieces) == len(scores) == len(types):
        raise ValueError("pieces, scores and types must have the same length")
    unknown = [index for index, kind in enumerate(types) if kind == PIECE_UNKNOWN]
    if unknown != [unk_id]:
        raise ValueError(f"piece {unk_id} must be the only unknown piece, not {unknown}")
    out = bytearray()
    for piece, score, kind in zip(pieces, scores, types, strict=True):
        body = _message(1, piece.encode("utf-8"))
        body += _key(2, _FIXED32) + struct.pack("<f", score)
        body += _integer(3, kind)
        out += _message(1, body)
    trainer = (
        _integer(3, _UNIGRAM)
        + _integer(4, len(pieces))
        + _integer(40, unk_id)
        + _integer(41, -1)  # no bos/eos/pad pieces: the tokenizer adds <s> and </s> itself
        + _integer(42, -1)
        + _integer(43, -1)
    )
    out += _message(2, trainer)
    normalizer = (
        _message(1, b"identity")
        + _integer(3, 0)  # add_dummy_prefix
        + _integer(4, 0)  # remove_extra_whitespaces
        + _integer(5, 1)  # escape_whitespaces
    )
    out += _message(3, normalizer)
    return bytes(out)
