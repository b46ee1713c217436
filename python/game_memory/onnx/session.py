"""An onnxruntime session that checks the model contract at load and can be terminated.

Memory: the sidecar keeps one session for its whole life, so what the session holds at
idle is what the game pays (the goal with the default model is <= 150 MB for the whole
sidecar; ``benchmarks/sidecar_memory.py`` measures it). onnxruntime's CPU arena stays on;
its growth is given back once the session has been idle a second (``arena.py``), and the C
heap is trimmed after loading (parsing the model file and optimizing the graph free tens
of megabytes that glibc would otherwise keep).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from game_memory.onnx.arena import SHRINK_RUN_OPTION, IdleArenaShrinker, release_freed_heap
from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.tokens import RunControl

__all__ = ["SPINNING_ENTRIES", "OnnxSessionInference", "session_options"]

_OUTPUT = "last_hidden_state"
_REQUIRED_INPUTS = frozenset({"input_ids", "attention_mask"})
_ALLOWED_INPUTS = _REQUIRED_INPUTS | {"token_type_ids"}


#: onnxruntime's switches for worker threads that spin between runs, waiting for work.
SPINNING_ENTRIES = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def session_options(
    *, intra_op_threads: int = 0, inter_op_threads: int = 1, allow_spinning: bool = False
) -> ort.SessionOptions:
    """The options of every session the providers open (see the module docstring).

    Args:
        intra_op_threads: Threads inside one operator; 0 lets onnxruntime choose.
        inter_op_threads: Threads across operators (sequential execution).
        allow_spinning: Let idle worker threads spin waiting for the next run
            (onnxruntime's own default). Off here: a game asks a question now and then,
            and between questions the spinning threads took a core from the game (see
            ``OnnxProviderOptions.allow_spinning``).
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = inter_op_threads
    if intra_op_threads > 0:
        options.intra_op_num_threads = intra_op_threads
    for entry in SPINNING_ENTRIES:
        options.add_session_config_entry(entry, "1" if allow_spinning else "0")
    options.log_severity_level = 3
    return options


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
        allow_spinning: Let idle worker threads spin waiting for work (see
            :func:`session_options`).

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
        allow_spinning: bool = False,
    ) -> None:
        options = session_options(
            intra_op_threads=intra_op_threads,
            inter_op_threads=inter_op_threads,
            allow_spinning=allow_spinning,
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
        self._shrinker = IdleArenaShrinker(self._shrink_arena)
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
            self._shrinker.ran()
        return np.asarray(hidden)

    def _shrink_arena(self) -> None:
        """One run of one token with the shrink option, then a heap trim (see ``arena.py``)."""
        session = self._session
        if session is None:
            return
        run_options = ort.RunOptions()
        run_options.log_severity_level = 4
        run_options.add_run_config_entry(*SHRINK_RUN_OPTION)
        one = np.ones((1, 1), dtype=np.int64)
        session.run([_OUTPUT], self.feeds(one, one), run_options)
        release_freed_heap()  # what the arena gave back to the C heap

    def close(self) -> None:
        """Drop the session; onnxruntime frees it once no run holds it."""
        self._shrinker.close()
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
