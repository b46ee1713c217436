class_name GameMemoryRequest
extends RefCounted
## One JSON-RPC call to the sidecar; it resolves exactly once with a result dictionary.
##
## [GameMemoryConnection] creates one per call with its own id, so concurrent calls from many
## NPCs never mix up. The request resolves once: answered, failed, timed out or cancelled;
## later attempts to resolve it are ignored. [method wait] never hangs, because the connection
## puts a deadline on every request it holds (one to be sent, then one to be answered) and fails
## every pending request when it closes.

#region Signals
## Emitted once, when the request resolves, with the same dictionary [method wait] returns.
signal completed(result: Dictionary)
#endregion


#region Variables
## The JSON-RPC id, unique on its connection.
var id: int = 0
## The JSON-RPC method, e.g. [code]"memory.recall"[/code].
var method: String = ""
## The JSON-RPC params sent with the request.
var params: Dictionary = {}
## How long the request may wait to be sent, and then how long the sidecar has to answer
## it once it is, in milliseconds (each wait gets the whole of it).
var timeout_msec: int = 0
## When the current wait ends ([method Time.get_ticks_msec] clock); 0 while no clock runs.
var deadline_msec: int = 0
## When the request was put on the wire ([method Time.get_ticks_msec] clock); 0 until then.
var sent_msec: int = 0
## The JSON text of the message, made once when the connection accepts the request and
## emptied once it is sent.
var message_text: String = ""
## The size of [member message_text] in UTF-8 bytes.
var message_bytes: int = 0

var _result: Dictionary = {}
var _finished: bool = false
#endregion


#region Methods
func _init(request_id: int, request_method: String, request_params: Dictionary,
		timeout_seconds: float) -> void:
	id = request_id
	method = request_method
	params = request_params
	timeout_msec = maxi(1, int(timeout_seconds * 1000.0))


## Starts (or restarts) the timeout clock at [param now_msec].
func start_clock(now_msec: int) -> void:
	deadline_msec = now_msec + timeout_msec


## Marks the request as put on the wire at [param now_msec] and starts its answer clock there.
func mark_sent(now_msec: int) -> void:
	sent_msec = maxi(1, now_msec)
	start_clock(now_msec)


## Returns true once the request has resolved.
func is_finished() -> bool:
	return _finished


## Returns the result dictionary; empty until the request has resolved.
func get_result() -> Dictionary:
	return _result


## Resolves the request with [param result] and emits [signal completed]. Returns false, and
## changes nothing, when the request had already resolved.
func finish(result: Dictionary) -> bool:
	if _finished:
		return false
	_finished = true
	_result = result
	completed.emit(result)
	return true


## Waits until the request resolves and returns its result; returns at once when it already has.
func wait() -> Dictionary:
	if not _finished:
		await completed
	return _result


## Returns the JSON-RPC message for this request.
func to_message() -> Dictionary:
	return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
#endregion
