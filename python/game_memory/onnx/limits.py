"""The bounds the shared inference engine enforces, as a plain value for the hot path."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineLimits"]


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """Validated bounds of one provider's engine; built from its options.

    Attributes:
        maximum_tokens: Token ids per text, special tokens included; longer texts are cut.
        maximum_characters_per_text: Longer texts are refused before tokenization.
        maximum_texts_per_call: Texts one ``embed_documents`` call may pass.
        maximum_batch_size: Texts in one onnxruntime run.
        maximum_batch_tokens: Unpadded token ids in one run (a single text always fits).
        maximum_tensor_bytes: Estimated bytes of a run's inputs and output; checked first.
        maximum_concurrent_inferences: Operations running at once.
        maximum_queued_operations: Operations waiting for a slot; one more fails at once.
        queue_timeout: Seconds an operation may wait for a slot.
        inference_timeout: Seconds an operation may run (tokenization and inference).
        batch_threads: Batches of one operation run at once (its worker thread and
            ``batch_threads - 1`` helpers); 1 runs them one after another.
    """

    maximum_tokens: int
    maximum_characters_per_text: int
    maximum_texts_per_call: int
    maximum_batch_size: int
    maximum_batch_tokens: int
    maximum_tensor_bytes: int
    maximum_concurrent_inferences: int
    maximum_queued_operations: int
    queue_timeout: float
    inference_timeout: float
    batch_threads: int = 1
