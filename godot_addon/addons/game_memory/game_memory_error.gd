class_name GameMemoryError
extends RefCounted
## Error codes and the failed-result shape of the Game Memory addon.
##
## Every awaitable method of [GameMemory] resolves with [code]{"ok": true, ...}[/code] or with
## [code]{"ok": false, "error": {"code": int, "message": String}}[/code] (plus [code]"data"[/code]
## when the sidecar sent some). Codes from -32700 to -32001 come from the sidecar and are
## listed here so a game can match on names; codes from -31001 are raised by the addon itself,
## on the game side of the connection. Every message says what happened and what to do.

#region Constants
## The sidecar could not parse a message (JSON-RPC parse error).
const PARSE_ERROR: int = -32700
## The sidecar refused a message: not a request, over 1 MiB, or a batch over 64 entries.
const INVALID_REQUEST: int = -32600
## The sidecar has no such method (an addon/sidecar version mismatch).
const METHOD_NOT_FOUND: int = -32601
## A parameter or option is missing or invalid; the message names it. The addon uses this code
## too when it refuses a call before sending it (an unknown option key, a message over 1 MiB).
const INVALID_PARAMS: int = -32602
## The sidecar failed unexpectedly; its own log has the details.
const INTERNAL_ERROR: int = -32603
## The token was wrong or missing, or [code]initialize[/code] did not come first.
const UNAUTHORIZED: int = -32001
## A [code]memory_id[/code] was reused for different content.
const CONFLICT: int = -32002
## A bound of the store was reached; [code]error.data.bound[/code] names it.
const CAPACITY_EXCEEDED: int = -32003
## The derived vector index must be rebuilt ([method GameMemory.rebuild]).
const REBUILD_REQUIRED: int = -32004
## No embedding model is loaded (lexical mode), so semantic work cannot run.
const EMBEDDING_UNAVAILABLE: int = -32005
## The authoritative save is corrupt or unsafe; the sidecar failed closed.
const STORAGE_CORRUPT: int = -32006
## Busy: a rebuild is already running, or too many requests are in flight.
const BUSY: int = -32007
## The sidecar gave up on the request at its own deadline (for example embedding took too long).
const TIMEOUT: int = -32008
## The sidecar is shutting down.
const SHUTTING_DOWN: int = -32009
## A [method GameMemory.forget] or [method GameMemory.consolidate] named a memory the NPC
## does not hold; nothing changed.
const NOT_FOUND: int = -32010
## The sidecar could not be launched, exited before it was ready, or printed no ready line.
const SIDECAR_FAILED: int = -31001
## The WebSocket connection to the sidecar could not be opened or initialized in time.
const CONNECTION_FAILED: int = -31002
## The connection closed (the sidecar died or was killed) while the request was pending.
const CONNECTION_LOST: int = -31003
## No answer arrived within [member GameMemory.request_timeout] seconds.
const REQUEST_TIMEOUT: int = -31004
## The sidecar answered with something that is not a valid JSON-RPC response.
const INVALID_RESPONSE: int = -31005
## [method GameMemory.stop] was called, or the node left the tree, while the request was pending;
## or the call was made on a node outside the scene tree (it only works in the tree).
const STOPPED: int = -31006
#endregion


#region Public methods
## Returns an error dictionary [code]{"code", "message"}[/code], with [code]"data"[/code] only
## when [param data] is not null.
static func make(code: int, message: String, data: Variant = null) -> Dictionary:
	var error: Dictionary = {"code": code, "message": message}
	if data != null:
		error["data"] = data
	return error


## Returns a failed result [code]{"ok": false, "error": {...}}[/code] for [param code] and
## [param message].
static func failure(code: int, message: String, data: Variant = null) -> Dictionary:
	return {"ok": false, "error": make(code, message, data)}


## Returns a failed result that carries [param error] (an error dictionary) unchanged.
static func failure_from(error: Dictionary) -> Dictionary:
	return {"ok": false, "error": error.duplicate(true)}
#endregion
