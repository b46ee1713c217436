class_name GameMemoryConnection
extends RefCounted
## A JSON-RPC 2.0 client on one WebSocket to the game-memory sidecar, polled, never blocking.
##
## Protocol version 1: one message per text frame, [code]initialize[/code] (with the token)
## first. Requests made before the connection is initialized wait in a queue and are sent once
## it is; at most [constant MAX_IN_FLIGHT] are on the wire at a time (the sidecar's limit per
## connection), the rest wait their turn, as does a message that would overflow the socket's
## outbound buffer. A request that timed out keeps its place on the wire until its late answer
## arrives or the sidecar's own deadline for it has passed, since the sidecar still runs it.
## A request has a deadline to be sent and, once sent, a deadline to be answered, each its own
## timeout. Messages are written with [GameMemoryJson], so control characters in text and
## ticks beyond 2^53 travel exactly. When the socket closes, every queued and pending request
## fails with the same error and [signal closed] is emitted once. A connection is used once:
## after it closes, make a new one.
## [br][br]
## Call [method poll] every frame; nothing happens between polls.

#region Signals
## Emitted once, when [code]initialize[/code] succeeded, with its result
## ([code]protocol_version[/code], [code]server[/code], [code]mode[/code], [code]model[/code]).
signal opened(server_info: Dictionary)
## Emitted once, when the connection failed, was lost or was closed, just before every
## unresolved request is failed with the same [param error] dictionary.
signal closed(error: Dictionary)
## Emitted for every notification the sidecar sent, e.g. [code]memory.diagnostic[/code].
signal notified(method: String, params: Dictionary)
#endregion


#region Enums and constants
## Where the connection is in its life; it only moves forward.
enum State {
	WAITING, ## Not opened yet: requests queue up.
	CONNECTING, ## The WebSocket handshake is running.
	INITIALIZING, ## [code]initialize[/code] was sent; waiting for its answer.
	OPEN, ## Initialized: requests are sent.
	CLOSED, ## Closed for good: requests fail at once.
}

## The bridge protocol version this client speaks.
const PROTOCOL_VERSION: int = 1
## The largest message this client may send, in bytes (the sidecar refuses more).
const MAX_MESSAGE_BYTES: int = 1048576
## The largest response the sidecar sends, in bytes (it replaces bigger ones by an error).
const MAX_RESPONSE_BYTES: int = 16777216
## The socket's inbound buffer size, in bytes: exactly the largest response, since Godot
## stores a message without its frame header. Godot reserves a ring of the next power of two
## above it (32 MiB) plus a read buffer of this size, about 48 MiB per connection, from the
## moment it connects (on the web, from the page's 2 GiB heap); so a game shares one node.
const INBOUND_BUFFER_BYTES: int = MAX_RESPONSE_BYTES
## The most requests on the wire at once; more wait in the queue.
const MAX_IN_FLIGHT: int = 64
## The size of the socket's outbound buffer, in bytes: a message that does not fit beside
## what is still buffered waits for a later [method poll] (Godot would refuse it).
const OUTBOUND_BUFFER_BYTES: int = MAX_MESSAGE_BYTES + 65536
## The sidecar's own deadline for a request, in milliseconds, until [code]initialize[/code]
## says the sidecar's (its [code]deadlines[/code]: [code]GAME_MEMORY_REQUEST_TIMEOUT[/code]
## changes it). A request that timed out here keeps its slot until its answer arrives, or
## this long (and [constant SIDECAR_DEADLINE_MARGIN_MSEC]) after it was sent.
const SIDECAR_REQUEST_DEADLINE_MSEC: int = 120000
## The sidecar's own deadline for [code]memory.rebuild[/code], in milliseconds.
const SIDECAR_REBUILD_DEADLINE_MSEC: int = 3600000
## Added to the sidecar's deadline before a timed-out request's slot is given back.
const SIDECAR_DEADLINE_MARGIN_MSEC: int = 5000
## How deep params may nest before a request is refused unsent.
const MAX_PARAMS_DEPTH: int = GameMemoryJson.MAX_DEPTH
#endregion


#region Private variables
var _state: State = State.WAITING
var _socket: WebSocketPeer = null
var _url: String = ""
var _token: String = ""
var _open_deadline_msec: int = 0
var _open_timeout_seconds: float = 0.0
var _next_id: int = 1
var _queue: Array[GameMemoryRequest] = []
var _in_flight: Dictionary = {}
# Ids of requests that timed out here but may still run in the sidecar, each with the
# Time.get_ticks_msec() at which its slot is given back if no answer came.
var _abandoned: Dictionary = {}
var _initialize: GameMemoryRequest = null
# The sidecar's deadlines (ms), as its initialize reported them (the defaults before).
var _request_deadline_msec: int = SIDECAR_REQUEST_DEADLINE_MSEC
var _rebuild_deadline_msec: int = SIDECAR_REBUILD_DEADLINE_MSEC
#endregion


#region Public methods
## Returns where the connection is in its life.
func get_state() -> State:
	return _state


## Returns the number of requests queued or on the wire.
func get_pending_count() -> int:
	return _queue.size() + _in_flight.size()


## Starts connecting to [param url] and initializing with [param token]; both must finish
## within [param timeout_seconds] or the connection closes with
## [constant GameMemoryError.CONNECTION_FAILED].
func open(url: String, token: String, timeout_seconds: float) -> void:
	if _state != State.WAITING:
		return
	_url = url
	_token = token
	_open_timeout_seconds = timeout_seconds
	_open_deadline_msec = Time.get_ticks_msec() + maxi(1, int(timeout_seconds * 1000.0))
	if not url.begins_with("ws://") and not url.begins_with("wss://"):
		_close_with(GameMemoryError.make(GameMemoryError.CONNECTION_FAILED,
				"%s is not a WebSocket URL; set GameMemory.server_url to the ws:// URL of the " % url
				+ "sidecar's ready line, e.g. ws://127.0.0.1:8765"))
		return
	_socket = WebSocketPeer.new()
	_socket.inbound_buffer_size = INBOUND_BUFFER_BYTES
	_socket.outbound_buffer_size = OUTBOUND_BUFFER_BYTES
	var error: Error = _socket.connect_to_url(url)
	if error != OK:
		_close_with(GameMemoryError.make(GameMemoryError.CONNECTION_FAILED,
				"could not start a WebSocket connection to %s (%s); check GameMemory.server_url"
				% [url, error_string(error)]))
		return
	_state = State.CONNECTING


## Queues a call of [param method] with [param params] and returns its request. The request
## may wait [param timeout_seconds] to be sent, counted from when it can be (at once when the
## connection is open, else when it opens): while [constant MAX_IN_FLIGHT] requests are on the
## wire or the outbound buffer is full. It then fails unsent with
## [constant GameMemoryError.REQUEST_TIMEOUT]. Once sent, the sidecar has
## [param timeout_seconds] to answer. It fails at once when the connection is closed, when
## [param params] holds something JSON cannot carry (a NaN or infinite number, a Vector2, an
## Object, a key that is not a String, a dictionary or array that contains itself), or when
## the message is over [constant MAX_MESSAGE_BYTES].
func request(method: String, params: Dictionary, timeout_seconds: float) -> GameMemoryRequest:
	var req: GameMemoryRequest = GameMemoryRequest.new(_next_id, method, params, timeout_seconds)
	_next_id += 1
	if _state == State.CLOSED:
		req.finish(GameMemoryError.failure(GameMemoryError.CONNECTION_LOST,
				"%s was not sent: the connection to the game-memory sidecar is closed" % method))
		return req
	var problem: String = GameMemoryJson.unsendable(params, "params")
	if not problem.is_empty():
		req.finish(GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
				"%s was not sent: %s" % [method, problem]))
		return req
	_encode(req)
	if req.message_bytes > MAX_MESSAGE_BYTES:
		req.finish(GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
				"%s was not sent: its message is %d bytes, over the %d byte limit; send less text"
				% [method, req.message_bytes, MAX_MESSAGE_BYTES]))
		return req
	if _state == State.OPEN:
		req.start_clock(Time.get_ticks_msec()) # its wait to be sent; restarted when it is
	_queue.append(req)
	if _state == State.OPEN:
		_send_queued()
	return req


## Restarts the timeout clock of every pending request of [param method]; a sidecar that
## reports progress (a long rebuild) is alive, so its request keeps waiting.
func extend_deadlines(method: String) -> void:
	var now: int = Time.get_ticks_msec()
	for req: GameMemoryRequest in _in_flight.values():
		if req.method == method:
			req.start_clock(now)


## Does the connection's work for this frame: reads the socket, resolves answered requests,
## sends queued ones and times out late ones. Never blocks.
func poll() -> void:
	if _state == State.WAITING or _state == State.CLOSED:
		return
	_socket.poll()
	var socket_state: WebSocketPeer.State = _socket.get_ready_state()
	if socket_state == WebSocketPeer.STATE_OPEN and _state == State.CONNECTING:
		_send_initialize()
	_receive()
	if _state == State.CLOSED:
		return
	if socket_state == WebSocketPeer.STATE_CLOSED:
		_close_with(_lost_error())
		return
	var now: int = Time.get_ticks_msec()
	if _state != State.OPEN and now >= _open_deadline_msec:
		_close_with(GameMemoryError.make(GameMemoryError.CONNECTION_FAILED,
				"could not connect to the game-memory sidecar at %s within %.1f s; check that it "
				% [_url, _open_timeout_seconds] + "is running and GameMemory.server_url is right"))
		return
	_send_queued()
	_expire(now)


## Closes the connection, failing every queued and pending request with [param error]
## (an error dictionary). Emits [signal closed] unless the connection was already closed.
func close(error: Dictionary) -> void:
	_close_with(error)
#endregion


#region Private methods
func _send_initialize() -> void:
	_state = State.INITIALIZING
	var params: Dictionary = {"protocol_version": PROTOCOL_VERSION, "token": _token}
	_initialize = GameMemoryRequest.new(0, "initialize", params, _open_timeout_seconds)
	_encode(_initialize)
	_initialize.mark_sent(Time.get_ticks_msec())
	_in_flight[0] = _initialize
	_send(_initialize)


func _encode(req: GameMemoryRequest) -> void:
	req.message_text = GameMemoryJson.stringify(req.to_message())
	req.message_bytes = req.message_text.to_utf8_buffer().size()


# Sends queued requests, oldest first, while a slot is free and the next message fits in the
# outbound buffer; the rest wait for a later poll. Each one's answer clock starts as it goes.
func _send_queued() -> void:
	while _state == State.OPEN and not _queue.is_empty() \
			and _in_flight.size() + _abandoned.size() < MAX_IN_FLIGHT:
		var req: GameMemoryRequest = _queue.front()
		if req.is_finished():
			_queue.pop_front()
			continue
		# Godot refuses a message that does not fit beside what is still buffered (an engine
		# error, and the message is lost), so wait for the buffer to drain instead.
		if _socket.get_current_outbound_buffered_amount() + req.message_bytes \
				>= OUTBOUND_BUFFER_BYTES:
			return
		_queue.pop_front()
		_in_flight[req.id] = req
		req.mark_sent(Time.get_ticks_msec())
		_send(req)


func _send(req: GameMemoryRequest) -> void:
	var error: Error = _socket.send_text(req.message_text)
	req.message_text = "" # the socket has its own copy
	if error != OK:
		_in_flight.erase(req.id)
		req.finish(GameMemoryError.failure(GameMemoryError.CONNECTION_LOST,
				"%s could not be sent to the game-memory sidecar (%s)"
				% [req.method, error_string(error)]))


func _receive() -> void:
	while _state != State.CLOSED and _socket.get_available_packet_count() > 0:
		var packet: PackedByteArray = _socket.get_packet()
		if not _socket.was_string_packet():
			push_warning("game-memory: ignored a binary frame from the sidecar")
			continue
		var parsed: Dictionary = GameMemoryJson.parse(packet.get_string_from_utf8())
		if not parsed["ok"]:
			push_warning("game-memory: ignored a frame that is not JSON: %s" % parsed["error"])
			continue
		var data: Variant = parsed["value"]
		if data is Array:
			for item: Variant in data:
				_dispatch(item)
		else:
			_dispatch(data)


func _dispatch(message: Variant) -> void:
	if _state == State.CLOSED or not message is Dictionary:
		return
	var body: Dictionary = message
	if body.has("method") and not body.has("id"):
		var params: Variant = body.get("params", {})
		notified.emit(str(body["method"]), params if params is Dictionary else {})
		return
	var raw_id: Variant = body.get("id")
	if not (raw_id is int or raw_id is float):
		push_warning("game-memory: the sidecar sent an answer without a usable id: %s"
				% JSON.stringify(body).left(300))
		return
	var req: GameMemoryRequest = _in_flight.get(int(raw_id))
	if req == null:
		# An answer that arrived after its request timed out: it was already resolved, and
		# the sidecar no longer runs it, so its slot is free again.
		_abandoned.erase(int(raw_id))
		return
	_in_flight.erase(req.id)
	var result: Dictionary = _result_of(req, body)
	if req == _initialize:
		_finish_initialize(result)
	else:
		req.finish(result)


func _result_of(req: GameMemoryRequest, body: Dictionary) -> Dictionary:
	var error: Variant = body.get("error")
	if error is Dictionary:
		var code: Variant = error.get("code")
		var text: String = str(error.get("message", "the sidecar gave no message"))
		if code is int or code is float:
			return GameMemoryError.failure(int(code), text, error.get("data"))
	elif body.has("result"):
		var value: Variant = body["result"]
		var result: Dictionary = {"ok": true}
		if value is Dictionary:
			result.merge(value)
		else:
			result["value"] = value
		return result
	return GameMemoryError.failure(GameMemoryError.INVALID_RESPONSE,
			"the sidecar's answer to %s is not a JSON-RPC response; are the addon and the "
			% req.method + "sidecar the same version?")


func _finish_initialize(result: Dictionary) -> void:
	_initialize.finish(result)
	if not result.get("ok", false):
		_close_with(result["error"])
		return
	_state = State.OPEN
	var info: Dictionary = result.duplicate()
	info.erase("ok")
	var deadlines: Variant = info.get("deadlines")
	if deadlines is Dictionary:
		_request_deadline_msec = _deadline_msec(deadlines, "request_seconds",
				SIDECAR_REQUEST_DEADLINE_MSEC)
		_rebuild_deadline_msec = _deadline_msec(deadlines, "rebuild_seconds",
				SIDECAR_REBUILD_DEADLINE_MSEC)
	var now: int = Time.get_ticks_msec()
	for req: GameMemoryRequest in _queue:
		req.start_clock(now)
	opened.emit(info)
	_send_queued()


# Returns the deadline under [param key] of the sidecar's [param deadlines] in milliseconds, or
# [param fallback] when it is not a positive number (an older sidecar sends none).
static func _deadline_msec(deadlines: Dictionary, key: String, fallback: int) -> int:
	var seconds: Variant = deadlines.get(key)
	if (seconds is float or seconds is int) and is_finite(float(seconds)) and float(seconds) > 0.0:
		return int(ceil(float(seconds) * 1000.0))
	return fallback


func _expire(now: int) -> void:
	for id: int in _abandoned.keys():
		if now >= int(_abandoned[id]):
			_abandoned.erase(id) # the sidecar's own deadline has passed: it gave up too
	var late: Array[GameMemoryRequest] = []
	for req: GameMemoryRequest in _in_flight.values():
		if req != _initialize and now >= req.deadline_msec:
			late.append(req)
	for req: GameMemoryRequest in late:
		# The sidecar still runs it: its slot stays taken until its answer or its deadline.
		_in_flight.erase(req.id)
		var deadline: int = _rebuild_deadline_msec if req.method == "memory.rebuild" \
				else _request_deadline_msec
		_abandoned[req.id] = req.sent_msec + deadline + SIDECAR_DEADLINE_MARGIN_MSEC
		req.finish(GameMemoryError.failure(GameMemoryError.REQUEST_TIMEOUT,
				"%s (request %d) got no answer within %.2f s; raise GameMemory.request_timeout "
				% [req.method, req.id, req.timeout_msec / 1000.0]
				+ "or check the sidecar, which may be overloaded or stuck"))
	var unsent: Array[GameMemoryRequest] = []
	for req: GameMemoryRequest in _queue:
		if req.deadline_msec > 0 and now >= req.deadline_msec:
			unsent.append(req)
	var on_the_wire: int = _in_flight.size() + _abandoned.size()
	for req: GameMemoryRequest in unsent:
		_queue.erase(req)
		req.finish(GameMemoryError.failure(GameMemoryError.REQUEST_TIMEOUT,
				"%s (request %d) was not sent within %.2f s: %d requests were on the wire (at "
				% [req.method, req.id, req.timeout_msec / 1000.0, on_the_wire]
				+ "most %d) and %d bytes waited to go out; the sidecar is overloaded or stuck: "
				% [MAX_IN_FLIGHT, _socket.get_current_outbound_buffered_amount()]
				+ "send fewer requests at once or raise GameMemory.request_timeout"))


func _lost_error() -> Dictionary:
	var code: int = _socket.get_close_code()
	var reason: String = _socket.get_close_reason()
	if _state == State.CONNECTING:
		return GameMemoryError.make(GameMemoryError.CONNECTION_FAILED,
				"could not connect to the game-memory sidecar at %s (close code %d); check that "
				% [_url, code] + "it is running and GameMemory.server_url is right")
	var detail: String = " (%s)" % reason if not reason.is_empty() else ""
	return GameMemoryError.make(GameMemoryError.CONNECTION_LOST,
			"the connection to the game-memory sidecar closed with code %d%s; the sidecar " % [code,
			detail] + "may have died: check its log, then call GameMemory.start() to reconnect")


func _close_with(error: Dictionary) -> void:
	if _state == State.CLOSED:
		return
	_state = State.CLOSED
	if _socket != null and _socket.get_ready_state() != WebSocketPeer.STATE_CLOSED:
		_socket.close(1000, "client closed")
	var unresolved: Array[GameMemoryRequest] = []
	for req: GameMemoryRequest in _in_flight.values():
		unresolved.append(req)
	unresolved.append_array(_queue)
	_in_flight.clear()
	_abandoned.clear()
	_queue.clear()
	# Announce first, so whoever awaits a failed request already sees the backend as failed.
	closed.emit(error)
	for req: GameMemoryRequest in unresolved:
		req.finish(GameMemoryError.failure_from(error))
#endregion
