"""The embedding seam: the provider protocol, what text is embedded, bounded calls, a fake.

:class:`EmbeddingProvider` is the smallest protocol recall needs from a model; the ONNX
providers (``game_memory.onnx``) and the deterministic :class:`HashingEmbeddingProvider`
implement it.
"""
