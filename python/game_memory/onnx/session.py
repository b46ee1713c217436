"""An onnxruntime session that checks the model contract at load and can be terminated.

Memory: the sidecar keeps one session for its whole life, so what the session holds at
idle is what the game pays (the goal with the default model is <= 150 MB for the whole
sidecar; ``benchmarks/sidecar_memory.py`` measures it). onnxruntime's CPU arena stays on
(without it every run maps and faults in its buffers afresh: 25-30% slower batches,
measured), but it is kept to the working set of small runs:

* **A large run's growth is given back.** The arena keeps the largest activations it ever
  held: three batches of 16 texts of 256 tokens grow it by ~400 MB that it never returns.
  A run of more than ``ARENA_KEEP_TOKENS`` tokens marks the arena grown; the next small run
  (a query, a short remember) asks onnxruntime to shrink it (run option
  ``memory.enable_memory_arena_shrinkage``), freeing every region no run uses, and trims
  the C heap. Consecutive
  large runs (a rebuild) reuse the grown arena at full speed; the small run that shrinks
  it pays the unmapping once (~0.2 s after 400 MB).
* **The heap is trimmed after loading** (glibc's ``malloc_trim``): parsing the model file
  and optimizing the graph free tens of megabytes that glibc would otherwise keep.

``benchmarks/sidecar_memory.py --compare-sessions`` measures these settings against
onnxruntime's defaults side by side (resident memory, and the time of the same runs).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.tokens import RunControl

__all__ = ["ARENA_KEEP_TOKENS", "OnnxSessionInference", "release_freed_heap", "session_options"]

#: Runs of more tokens (batch x padded length) than this have the arena shrunk after them
#: (at the next small run): 128 keeps a query or a short remember.
ARENA_KEEP_TOKENS = 128
_SHRINK_ARENA = ("memory.enable_memory_arena_shrinkage", "cpu:0")

_OUTPUT = "last_hidden_state"
_REQUIRED_INPUTS = frozenset({"input_ids", "attention_mask"})
_ALLOWED_INPUTS = _REQUIRED_INPUTS | {"token_type_ids"}


def session_options(*, intra_op_threads: int = 0, inter_op_threads: int = 1) -> ort.SessionOptions:
    """The options of every session the providers open (see the module docstring).

    Args:
        intra_op_threads: Threads inside one operator; 0 lets onnxruntime choose.
        inter_op_threads: Threads across operators (sequential execution).
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = inter_op_threads
    if intra_op_threads > 0:
        options.intra_op_num_threads = intra_op_threads
    options.log_severity_level = 3
    return options


def release_freed_heap() -> None:
    """Give memory the C heap holds but no longer uses back to the system (glibc only).

    A no-op where the C library has no ``malloc_trim`` (macOS, Windows, musl).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


class OnnxSessionInference:
    """Run ``last_hidden_state`` of an encoder on CPU; a ``BatchInference``.

    The model must take int64 ``input_ids`` and ``attention_mask`` (and optionally
    ``token_type_ids``, fed zeros) and nothing else, and produce a float
    ``last_hidden_state`` of rank 3 whose last dimension is ``hidden_size``.

    Args:
        model_path: The ``.onnx`` file.
        hidden_size: The width the contract requires.
        intra_op_threads: Threads inside one operator; 0 lets onnxruntime choose.
        inter_op_threads: Threads across operators (sequential execution).

    Raises:
        OnnxEmbeddingError: ``UNSUPPORTED_MODEL`` if onnxruntime cannot load the file or
            the model breaks the contract.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        hidden_size: int,
        intra_op_threads: int = 0,
        inter_op_threads: int = 1,
    ) -> None:
        options = session_options(
            intra_op_threads=intra_op_threads, inter_op_threads=inter_op_threads
        )
        try:
            session = ort.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise onnx_error(
                OnnxFailureKind.UNSUPPORTED_MODEL,
                f"onnxruntime cannot load {model_path}: {exc}",
            ) from exc
        self._hidden_size = hidden_size
        self._feeds_token_types = _check_contract(session, model_path, hidden_size)
        self._session: ort.InferenceSession | None = session
        self._arena_grown = False
        release_freed_heap()  # the model file's parse and the graph optimizer's leftovers

    @property
    def hidden_size(self) -> int:
        """The width of ``last_hidden_state``."""
        return self._hidden_size

    @property
    def session(self) -> ort.InferenceSession:
        """The onnxruntime session (for benchmarks comparing against a bare run)."""
        if self._session is None:
            raise onnx_error(OnnxFailureKind.CLOSED, "the onnxruntime session was released")
        return self._session

    def feeds(
        self, input_ids: npt.NDArray[np.int64], attention_mask: npt.NDArray[np.int64]
    ) -> dict[str, npt.NDArray[np.int64]]:
        """The input dictionary of one run, with ``token_type_ids`` if the model takes it."""
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self._feeds_token_types:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        return feeds

    def run(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        control: RunControl,
    ) -> npt.NDArray[np.float32]:
        """Run one batch; ``control.cancel()`` sets the run's terminate flag.

        Raises:
            OnnxEmbeddingError: ``INFERENCE`` when onnxruntime fails (after a
                cancellation the engine reports the cancellation instead).
        """
        session = self.session
        run_options = ort.RunOptions()
        # Failures are reported through our errors; keep onnxruntime's log quiet.
        run_options.log_severity_level = 4
        shrink = False
        if input_ids.size > ARENA_KEEP_TOKENS:
            self._arena_grown = True
        elif self._arena_grown:
            # Concurrent runs may race on the flag: at worst one more or one fewer shrink.
            self._arena_grown, shrink = False, True
            run_options.add_run_config_entry(*_SHRINK_ARENA)

        def terminate() -> None:
            # onnxruntime checks the flag between nodes (Loop bodies included).
            run_options.terminate = True

        unregister = control.on_cancel(terminate)
        try:
            (hidden,) = session.run([_OUTPUT], self.feeds(input_ids, attention_mask), run_options)
        except Exception as exc:
            raise onnx_error(
                OnnxFailureKind.INFERENCE, f"onnxruntime failed to run the model: {exc}"
            ) from exc
        finally:
            unregister()
        if shrink:
            release_freed_heap()  # what the arena gave back to the C heap
        return np.asarray(hidden)

    def close(self) -> None:
        """Drop the session; onnxruntime frees it once no run holds it."""
        self._session = None


def _check_contract(session: ort.InferenceSession, model_path: Path, hidden_size: int) -> bool:
    def unsupported(reason: str) -> Exception:
        return onnx_error(
            OnnxFailureKind.UNSUPPORTED_MODEL, f"the model {model_path} is unsupported: {reason}"
        )

    inputs = {node.name: node for node in session.get_inputs()}
    missing = sorted(_REQUIRED_INPUTS - inputs.keys())
    if missing:
        raise unsupported(f"it lacks the inputs {missing}")
    extra = sorted(inputs.keys() - _ALLOWED_INPUTS)
    if extra:
        raise unsupported(f"it needs the unknown inputs {extra}")
    for node in inputs.values():
        if node.type != "tensor(int64)":
            raise unsupported(f"input {node.name} is {node.type}, not tensor(int64)")
    outputs = {node.name: node for node in session.get_outputs()}
    output = outputs.get(_OUTPUT)
    if output is None:
        raise unsupported(f"it has no {_OUTPUT} output (outputs: {sorted(outputs)})")
    if output.type != "tensor(float)":
        raise unsupported(f"{_OUTPUT} is {output.type}, not tensor(float)")
    shape = output.shape
    if shape is None or len(shape) != 3:
        raise unsupported(f"{_OUTPUT} has shape {shape}, not [batch, sequence, {hidden_size}]")
    if shape[2] != hidden_size:
        raise unsupported(f"{_OUTPUT} has width {shape[2]}, not {hidden_size}")
    return "token_type_ids" in inputs
