@tool
@icon("res://addons/game_memory/icons/game_memory.svg")
class_name GameMemory
extends Node
## Long-term memory for NPCs: remember and recall on game time through the game-memory sidecar.
##
## Add a single GameMemory node that serves all NPCs (an autoload works well: each call names
## its owner, and each connected node reserves about 48 MiB for its connection, see
## [constant GameMemoryConnection.INBOUND_BUFFER_BYTES]) and await its methods. Each resolves
## exactly once with a [Dictionary]: [code]{"ok": true, ...}[/code] with the answer, or
## [code]{"ok": false, "error": {"code": int, "message": String}}[/code]; see [GameMemoryError]
## for the codes. Nothing blocks the main thread: the WebSocket is polled in
## [method Node._process], and every call has its own id and its own timeout, so many NPCs may
## await at once.
## [br][br]
## On desktop, leave [member server_url] empty: the node launches the sidecar
## ([code]game-memory serve[/code]) and connects to it. With [member sidecar_command] empty
## it uses the bundle beside the exported game, then the project setting
## [code]game_memory/sidecar/path[/code], then [code]game-memory[/code] on the PATH (see
## [GameMemorySidecarLocator]); the export plugin copies the bundle that
## [code]game-memory bundle[/code] builds. Elsewhere (web exports, tests, a shared server),
## run the sidecar yourself and set [member server_url] and [member token].
## [br][br]
## The script is [code]@tool[/code] only to show a configuration warning in the editor when no
## sidecar can be found; it never starts a sidecar in the editor.
## [codeblock]
## @onready var memory: GameMemory = $GameMemory
##
## func _on_theft_seen(guard: String, tick: int) -> void:
##     var moment: Dictionary = {"timeline_id": "main", "tick": tick}
##     await memory.remember(guard, "The player stole bread at the market.", moment)
##
## func _greet(guard: String, tick: int) -> void:
##     var moment: Dictionary = {"timeline_id": "main", "tick": tick}
##     var result: Dictionary = await memory.recall(guard, "player bread", moment)
##     if result["ok"]:
##         for item: Dictionary in result["memories"]:
##             print(item["text"])
##     else:
##         push_warning(result["error"]["message"])
## [/codeblock]

#region Signals
## Emitted when the sidecar is connected and initialized; requests made before are sent now.
signal backend_ready
## Emitted once per failure when the backend cannot be started or is lost (the sidecar died,
## the connection closed, the token was refused). Every unresolved request has failed with
## the same [param error]; call [method start] to try again. A failure found as the node
## starts (nothing to launch, a malformed URL) is emitted when the frame is idle, never inside
## [method start] or [code]_ready[/code], so a handler connected in the game's
## [code]_ready[/code] hears of it; calls made meanwhile resolve right after it.
signal backend_failed(error: Dictionary)
## Emitted after [method remember] succeeded, with the stored memory.
signal memory_remembered(memory: Dictionary)
## Emitted after [method remember_many] succeeded, with its [param results] (one
## [code]{"memory_id": String, "created": bool}[/code] per memory, in order).
signal memories_remembered(results: Array)
## Emitted after a recall succeeded ([method recall], or each query of [method recall_many]),
## with the owner asked about and the memories found.
signal memory_recalled(owner_id: String, memories: Array)
## Emitted while [method rebuild] runs: [param done] of [param total] entries are embedded.
signal rebuild_progressed(done: int, total: int)
## Emitted when [method rebuild] resolved, with the same dictionary it returns (the index
## status on success, or [code]"ok": false[/code] and the error); not when it resolved with
## [constant GameMemoryError.STOPPED] (the node was stopped, left the tree or was freed first,
## or was outside the tree): a node being stopped emits nothing.
signal rebuild_completed(status: Dictionary)
## Emitted after [method forget] succeeded: [param memory_id] of [param owner_id] is forgotten
## as of the game moment [param at] (earlier moments still recall it).
signal memory_forgotten(owner_id: String, memory_id: String, at: Dictionary)
## Emitted after [method erase_owner] or [method erase_session] succeeded: [param count]
## memories of [param owner_id] (empty for the whole session) are gone for good.
signal memories_erased(owner_id: String, count: int)
## Emitted after [method consolidate] succeeded, with the stored [param summary] (its
## [code]consolidates[/code] lists the sources, retracted as of its moment).
signal memories_consolidated(owner_id: String, summary: Dictionary)
## Emitted for every diagnostic the sidecar sends ([code]code[/code], [code]severity[/code],
## [code]message[/code], [code]session_id[/code], [code]owner_id[/code],
## [code]memory_id[/code], [code]details[/code]), e.g. [code]embedding_model_unavailable[/code].
signal diagnostic_emitted(diagnostic: Dictionary)
#endregion

#region Enums
## Where the backend is in its life.
enum State {
	IDLE, ## Not started, or stopped.
	LAUNCHING, ## Launching the sidecar and waiting for its ready line.
	CONNECTING, ## Connecting to the sidecar and initializing.
	READY, ## Connected: requests are answered.
	FAILED, ## Failed or lost; requests fail at once until [method start] is called.
}
#endregion

#region Exported properties
@export_group("Connection")
## The sidecar's WebSocket URL, e.g. [code]ws://127.0.0.1:8765[/code]. Empty: launch a
## sidecar with [member sidecar_command] (desktop only).
@export var server_url: String = "":
	set(value):
		server_url = value
		update_configuration_warnings()
## The token the sidecar printed or was given with [code]--token-file[/code]; used with
## [member server_url] (a launched sidecar's token is read from its ready line).
@export var token: String = ""
## Start the backend when the node is ready. When false, the first request starts it.
@export var autostart: bool = true

@export_group("Sidecar")
## The program that runs the sidecar: a full path, or a name on the PATH. Empty (the
## default): the bundle beside the game, then [code]game_memory/sidecar/path[/code], then
## [code]game-memory[/code] on the PATH.
@export var sidecar_command: String = "":
	set(value):
		sidecar_command = value
		update_configuration_warnings()
## Arguments put before [code]serve[/code], e.g. [code]["-m", "game_memory.cli"][/code]
## when [member sidecar_command] is a Python interpreter.
@export var sidecar_arguments: PackedStringArray = PackedStringArray()
## The embedding model the launched sidecar loads: [code]default[/code] (English),
## [code]multilingual[/code] (about 100 languages), [code]lexical[/code], [code]hashing[/code]
## or a model folder.
@export var model: String = "default"
## How the launched sidecar fuses lexical and vector rankings: empty for the measured
## default, or [code]convex[/code], [code]rrf[/code], [code]weighted_rrf[/code].
@export var fusion: String = ""
## Options of the launched sidecar's recall by name, e.g.
## [code]{"fusion": {"vector_weight": 0.8}, "reranker": {"recency_weight": 0.3}}[/code]
## (the fields of FusionOptions and GameAwareMemoryRerankerOptions; see docs/retrieval.md).
@export var recall_options: Dictionary = {}
## The retention policy of the launched sidecar: when a remember takes an NPC past this many
## memories, its lowest-value ones (low importance, old in game time) are erased for good
## down to 90% of it, and a [code]memories_evicted[/code] diagnostic says how many. 0: off.
@export_range(0, 1000000, 1, "or_greater") var maximum_memories_per_owner: int = 0
## The most memories the launched sidecar's whole save may hold, up to 1,000,000: a remember
## past it fails with [constant GameMemoryError.CAPACITY_EXCEEDED]. 0: the sidecar's default
## (100,000). A save grown past the default must be launched with its bound every time.
@export_range(0, 1000000, 1) var maximum_entries: int = 0
## The authoritative save folder of the launched sidecar: [code]user://[/code] (a per-user
## writable folder) or an absolute path, never [code]res://[/code] (the game's install folder).
@export var save_directory: String = "user://game_memory/save":
	set(value):
		save_directory = value
		update_configuration_warnings()
## The derived index folder of the launched sidecar; it can always be rebuilt from the save.
@export var index_directory: String = "user://game_memory/index":
	set(value):
		index_directory = value
		update_configuration_warnings()

@export_group("Session")
## The save session every call reads and writes; use one per save slot.
@export var session_id: String = "default"

@export_group("Timeouts")
## Seconds the sidecar has to answer a request once it is sent, and seconds a request may
## wait to be sent while 64 are on the wire; a late request resolves with
## [constant GameMemoryError.REQUEST_TIMEOUT]. A rebuild's clock restarts with every progress
## report.
@export_range(0.05, 600.0, 0.05, "suffix:s") var request_timeout: float = 10.0
## Seconds a launched sidecar has to print its ready line, and the connection has to open.
@export_range(0.5, 600.0, 0.5, "suffix:s") var startup_timeout: float = 30.0
#endregion

#region Private variables
var _state: State = State.IDLE
var _connection: GameMemoryConnection = null
var _sidecar: GameMemorySidecar = null
var _server_info: Dictionary = {}
var _last_error: Dictionary = {}
var _starting: bool = false
var _announcing: bool = false
var _unannounced: Array[GameMemoryRequest] = []
# True while stop() runs: calls it resolves emit no signal (a node being stopped emits nothing).
var _stopping: bool = false
#endregion


#region Static methods
## Returns why [param save_folder] or [param index_folder] cannot hold a save (a
## [code]res://[/code] path is inside the game's install folder, read-only once exported),
## or "" when both can.
static func install_folder_problem(save_folder: String, index_folder: String) -> String:
	for folder: String in [save_folder, index_folder]:
		if folder.strip_edges().begins_with("res://"):
			return "%s is inside the game's install folder, which players cannot write; " \
					% folder + "use a user:// folder for save_directory and index_directory"
	return ""
#endregion


#region Engine callbacks
func _init() -> void:
	# Keep answering while the game is paused (a pause menu must not time memory calls out).
	if not Engine.is_editor_hint():
		process_mode = Node.PROCESS_MODE_ALWAYS


func _ready() -> void:
	if Engine.is_editor_hint():
		set_process(false) # in the editor the node only reports configuration warnings
		return
	if autostart:
		start()


func _process(_delta: float) -> void:
	if _sidecar != null:
		_sidecar.poll()
	if _connection != null:
		_connection.poll()


func _exit_tree() -> void:
	stop()


func _notification(what: int) -> void:
	# A node freed in the tree gets this before _exit_tree; one freed outside it was stopped
	# when it left. Either way a launched sidecar is asked to finish and exit, not killed.
	if what == NOTIFICATION_PREDELETE:
		stop()


func _get_configuration_warnings() -> PackedStringArray:
	var warnings: PackedStringArray = PackedStringArray()
	if server_url.is_empty() and sidecar_command.is_empty():
		var located: Dictionary = GameMemorySidecarLocator.locate_for_this_game()
		if not located["ok"]:
			warnings.append(str(located["error"]["message"]))
	var problem: String = install_folder_problem(save_directory, index_directory)
	if not problem.is_empty():
		warnings.append(problem)
	return warnings
#endregion


#region Public methods
## Starts the backend: connects to [member server_url], or launches the sidecar when it is
## empty. Does nothing while starting or ready. [signal backend_ready] or
## [signal backend_failed] follows, never during this call: a failure found at once (nothing
## to launch, a malformed URL) is announced when the frame is idle, so a handler connected
## right after (in the parent's [code]_ready[/code], after an autostart) still hears of it.
## The node is [constant State.FAILED] at once; calls made meanwhile resolve with the failure
## right after [signal backend_failed].
func start() -> void:
	if Engine.is_editor_hint():
		return # never a sidecar in the editor; _call() answers there instead
	if _state == State.LAUNCHING or _state == State.CONNECTING or _state == State.READY:
		return
	_starting = true
	_start_backend()
	_starting = false


## Stops the backend: every unresolved request fails with [constant GameMemoryError.STOPPED],
## and a launched sidecar is asked to exit: it finishes the requests it already received
## (writes included), then exits. It is watched every frame even if this node leaves the tree
## or is freed, and killed after [constant GameMemorySidecar.EXIT_GRACE_MSEC] if it still
## runs; when the game quits, its last frame waits up to
## [constant GameMemorySidecarReaper.QUIT_WAIT_MSEC] for it. Leaving the tree, being freed
## and quitting call this. Emits nothing: the awaited calls resolve, but no signal announces
## them (not even [signal rebuild_completed]).
func stop() -> void:
	if _state == State.IDLE:
		return
	# The calls failed below resume their awaiters inside this call; a flag, not a return
	# value, tells them not to signal (restored, since an awaiter may call start() and stop()).
	var was_stopping: bool = _stopping
	_stopping = true
	_state = State.IDLE
	_server_info = {}
	_finish_unannounced()
	if _connection != null:
		_connection.close(GameMemoryError.make(GameMemoryError.STOPPED,
				"GameMemory was stopped (stop() was called or the node left the tree) before "
				+ "the answer came; start() it again to send more requests"))
	if _sidecar != null:
		_sidecar.stop()
	_stopping = was_stopping


## Returns where the backend is in its life.
func get_state() -> State:
	return _state


## Returns true when the sidecar is connected and initialized.
func is_backend_ready() -> bool:
	return _state == State.READY


## Returns what the sidecar said when it was initialized: [code]protocol_version[/code],
## [code]server[/code], [code]mode[/code] ([code]"hybrid"[/code] or [code]"lexical"[/code])
## and [code]model[/code]; empty until [signal backend_ready].
func get_server_info() -> Dictionary:
	return _server_info.duplicate()


## Returns the error the backend last failed with; empty when it has not failed.
func get_last_error() -> Dictionary:
	return _last_error.duplicate()


## Stores a memory of [param owner_id] (an NPC, a faction) about [param text] at the game
## [param moment] ([code]{"timeline_id": String, "tick": int}[/code]). [param options]:
## [code]kind[/code] (event, fact, relationship, goal, reflection, procedure),
## [code]scope[/code], [code]importance[/code] (0..1), [code]tags[/code],
## [code]payload[/code], [code]memory_id[/code], [code]expires_at[/code] (a moment),
## [code]source_input_id[/code], [code]metadata[/code], [code]belief_key[/code] (an id such as
## [code]"bridge.eastmarch"[/code]: memories of one owner with one key are versions of one
## belief, and a recall as of a moment sees only the newest version visible then).
## Resolves with [code]memory_id[/code], [code]created[/code] (false when the same memory was
## already stored: resending is a no-op) and [code]memory[/code].
func remember(owner_id: String, text: String, moment: Dictionary,
		options: Dictionary = {}) -> Dictionary:
	var built: Dictionary = GameMemoryCodec.remember_params(
			session_id, owner_id, text, moment, options)
	if not built["ok"]:
		return built
	var result: Dictionary = await _call("memory.remember", built["params"])
	if result["ok"]:
		result["memory"] = GameMemoryCodec.memory(result.get("memory"))
		result["created"] = bool(result.get("created", false))
		memory_remembered.emit(result["memory"])
	return result


## Stores many memories in one round trip, as one atomic batch: all of them are stored, or
## (on an error, or if the sidecar dies first) none. Each entry is a Dictionary with
## [code]owner_id[/code], [code]text[/code], [code]moment[/code] and any [method remember]
## option; at most 256 entries. Much faster than one [method remember] per memory when a game
## loads or imports many memories at once. Resolves with [code]results[/code]: one
## [code]{"memory_id": String, "created": bool}[/code] per entry, in the same order
## ([code]created[/code] is false for a memory already stored or given earlier in the batch).
func remember_many(entries: Array) -> Dictionary:
	var built: Dictionary = GameMemoryCodec.remember_many_params(session_id, entries)
	if not built["ok"]:
		return built
	var result: Dictionary = await _call("memory.remember_many", built["params"])
	if not result["ok"]:
		return result
	var raw: Variant = result.get("results")
	if not raw is Array or raw.size() != entries.size():
		return GameMemoryError.failure(GameMemoryError.INVALID_RESPONSE,
				"the sidecar answered remember_many with no result per memory; are the addon "
				+ "and the sidecar the same version?")
	var items: Array = raw
	var results: Array = []
	for item: Variant in items:
		var entry: Dictionary = item if item is Dictionary else {}
		results.append({"memory_id": str(entry.get("memory_id", "")),
				"created": bool(entry.get("created", false))})
	result["results"] = results
	memories_remembered.emit(results)
	return result


## Recalls what [param owner_id] remembers about [param text] as of the game moment
## [param at_or_before]: memories from later in that timeline are never returned. An empty
## owner, text or moment does not narrow the recall. [param options]: [code]limit[/code]
## (default 8), [code]scopes[/code], [code]kinds[/code], [code]tags[/code],
## [code]minimum_importance[/code], [code]require_semantic[/code].
## Resolves with [code]memories[/code] (dictionaries with [code]memory_id, owner_id, text,
## kind, scope, moment, importance, tags, payload[/code] and [code]why[/code]),
## [code]stages[/code] and [code]fallback[/code] (true when lexical recall answered alone).
func recall(owner_id: String, text: String, at_or_before: Dictionary,
		options: Dictionary = {}) -> Dictionary:
	var built: Dictionary = GameMemoryCodec.recall_params(
			session_id, owner_id, text, at_or_before, options)
	if not built["ok"]:
		return built
	var result: Dictionary = GameMemoryCodec.recall_result(
			await _call("memory.recall", built["params"]))
	if result["ok"]:
		memory_recalled.emit(owner_id, result["memories"])
	return result


## Runs several recalls in one round trip, e.g. one per NPC in a scene. Each query is a
## Dictionary with [code]owner_id[/code], [code]text[/code], [code]at_or_before[/code] and any
## [method recall] option. Resolves with [code]results[/code]: one entry per query, in the same
## order, each shaped like a [method recall] result; one bad query does not fail the others.
func recall_many(queries: Array) -> Dictionary:
	var built: Dictionary = GameMemoryCodec.recall_many_params(session_id, queries)
	if not built["ok"]:
		return built
	var result: Dictionary = await _call("memory.recall_many", built["params"])
	if not result["ok"]:
		return result
	var raw: Variant = result.get("results")
	if not raw is Array or raw.size() != queries.size():
		return GameMemoryError.failure(GameMemoryError.INVALID_RESPONSE,
				"the sidecar answered recall_many with no result per query; are the addon and "
				+ "the sidecar the same version?")
	var entries: Array = []
	for index: int in queries.size():
		var entry: Variant = raw[index]
		var normalized: Dictionary = GameMemoryCodec.recall_result(
				entry if entry is Dictionary else {"ok": false, "error": GameMemoryError.make(
				GameMemoryError.INVALID_RESPONSE, "the sidecar sent no result for this query")})
		entries.append(normalized)
		if normalized.get("ok", false):
			memory_recalled.emit(GameMemoryCodec.query_owner(queries[index]),
					normalized["memories"])
	result["results"] = entries
	return result


## Reports the state of the session's derived vector index: [code]mode[/code],
## [code]state[/code] (empty, ready, degraded, rebuild_required, lexical),
## [code]active_identity[/code], the entry counts and [code]requires_rebuild[/code].
func status() -> Dictionary:
	return GameMemoryCodec.status_result(
			await _call("memory.status", {"session_id": session_id}))


## Rebuilds the session's derived vector index from the save ([param force]: re-embed every
## entry, not only stale ones), emitting [signal rebuild_progressed] as it goes and
## [signal rebuild_completed] at the end (not when the node is stopped first). Resolves with
## the new status.
func rebuild(force: bool = false) -> Dictionary:
	var result: Dictionary = GameMemoryCodec.status_result(
			await _call("memory.rebuild", {"session_id": session_id, "force": force}))
	if _may_announce(result):
		rebuild_completed.emit(result)
	return result


## Makes [param owner_id] forget the memory [param memory_id] as of the game moment [param at]
## ([code]{"timeline_id": String, "tick": int}[/code]): recalls as of [param at] or later on
## that timeline no longer return it; earlier moments and other timelines still do, so a
## save loaded from before remembers again. Durable like a remember. Resolves with
## [code]memory_id[/code] and [code]forgotten[/code] (false when it was forgotten by then
## already); an unknown memory fails with [constant GameMemoryError.NOT_FOUND].
func forget(owner_id: String, memory_id: String, at: Dictionary) -> Dictionary:
	var bad_moment: Dictionary = GameMemoryCodec.moment_problem(at, "at")
	if not bad_moment.is_empty():
		return bad_moment
	var params: Dictionary = {
		"session_id": session_id,
		"owner_id": owner_id,
		"memory_id": memory_id,
		"at": GameMemoryCodec.wire_moment(at),
	}
	var result: Dictionary = await _call("memory.forget", params)
	if result["ok"]:
		result["forgotten"] = bool(result.get("forgotten", false))
		memory_forgotten.emit(owner_id, memory_id, GameMemoryCodec.wire_moment(at))
	return result


## Erases the memories of [param owner_id] for good (not on game time: an earlier save does
## not bring them back). Without [param memory_ids] (or with [code]null[/code]) all of them
## go; with a list (a [PackedStringArray] or an [Array] of Strings) only those, so an empty
## list, such as a filter that matched nothing, erases nothing. Their text and vectors leave
## the save and the index. Resolves with [code]erased[/code], how many went; a list of
## another type fails with [constant GameMemoryError.INVALID_PARAMS] before anything is sent.
func erase_owner(owner_id: String, memory_ids: Variant = null) -> Dictionary:
	var built: Dictionary = GameMemoryCodec.erase_owner_params(session_id, owner_id, memory_ids)
	if not built["ok"]:
		return built
	return await _erase(owner_id, built["params"])


## Erases every memory of the session ([member session_id]) for good, e.g. when the player
## deletes the save slot. Resolves with [code]erased[/code].
func erase_session() -> Dictionary:
	return await _erase("", {"session_id": session_id})


## Replaces the memories [param memory_ids] of [param owner_id] with one summary, a
## reflection the game (or its dialogue model) wrote: [param text] at the game [param moment]
## with the [method remember] [param options]. As of [param moment] the sources are no longer
## recalled, the summary is (its [code]consolidates[/code] lists them); earlier moments recall
## the sources as before. Both or neither. Resolves like [method remember].
func consolidate(owner_id: String, memory_ids: Array, text: String, moment: Dictionary,
		options: Dictionary = {}) -> Dictionary:
	var built: Dictionary = GameMemoryCodec.remember_params(
			session_id, owner_id, text, moment, options)
	if not built["ok"]:
		return built
	var summary: Dictionary = built["params"]
	summary.erase("session_id")
	summary.erase("owner_id")
	var params: Dictionary = {
		"session_id": session_id,
		"owner_id": owner_id,
		"memory_ids": memory_ids.duplicate(),
		"summary": summary,
	}
	var result: Dictionary = await _call("memory.consolidate", params)
	if result["ok"]:
		result["memory"] = GameMemoryCodec.memory(result.get("memory"))
		result["created"] = bool(result.get("created", false))
		memories_consolidated.emit(owner_id, result["memory"])
	return result


## Migrates the sidecar's stores to the current on-disk format. Resolves with
## [code]migrated_entries[/code], [code]partitioned_entries[/code] and
## [code]vector_entries[/code].
func migrate() -> Dictionary:
	return GameMemoryCodec.migrate_result(await _call("memory.migrate", {}))
#endregion


#region Private methods
func _start_backend() -> void:
	_discard_backend()
	_last_error = {}
	_connection = GameMemoryConnection.new()
	_connection.opened.connect(_on_connection_opened)
	_connection.closed.connect(_on_backend_failed)
	_connection.notified.connect(_on_notified)
	if not server_url.is_empty():
		_state = State.CONNECTING
		_connection.open(server_url, token, startup_timeout)
		return
	_state = State.LAUNCHING
	_sidecar = _new_sidecar()
	_sidecar.started.connect(_on_sidecar_started)
	_sidecar.failed.connect(_on_backend_failed)
	var problem: String = install_folder_problem(save_directory, index_directory)
	if not problem.is_empty():
		_on_backend_failed(GameMemoryError.make(GameMemoryError.SIDECAR_FAILED, problem))
		return
	var command: String = sidecar_command
	if command.is_empty() and not OS.has_feature("web"):
		var located: Dictionary = GameMemorySidecarLocator.locate_for_this_game()
		if not located["ok"]:
			_on_backend_failed(located["error"])
			return
		command = str(located["command"])
	for folder: String in [save_directory, index_directory]:
		DirAccess.make_dir_recursive_absolute(ProjectSettings.globalize_path(folder))
	var arguments: PackedStringArray = GameMemorySidecar.build_arguments(
			sidecar_arguments, save_directory, index_directory, model)
	arguments.append_array(GameMemorySidecar.recall_arguments(fusion, recall_options))
	arguments.append_array(GameMemorySidecar.retention_arguments(maximum_memories_per_owner))
	arguments.append_array(GameMemorySidecar.capacity_arguments(maximum_entries))
	_sidecar.launch(command, arguments, startup_timeout)


func _erase(owner_id: String, params: Dictionary) -> Dictionary:
	var result: Dictionary = await _call("memory.erase", params)
	if result["ok"]:
		result["erased"] = int(result.get("erased", 0))
		memories_erased.emit(owner_id, result["erased"])
	return result


func _call(method: String, params: Dictionary) -> Dictionary:
	if Engine.is_editor_hint():
		return GameMemoryError.failure(GameMemoryError.SIDECAR_FAILED, "%s was not sent: " \
				% method + "GameMemory starts no sidecar in the editor; call it from the game")
	if not is_inside_tree():
		# Only a node in the tree is polled (_process): a request sent now would never resolve.
		return GameMemoryError.failure(GameMemoryError.STOPPED, "%s was not sent: " % method
				+ "GameMemory is not in the scene tree, where it does its work; add it to the "
				+ "tree (or use the Memory autoload) before calling it")
	if _state == State.IDLE:
		start()
	var request: GameMemoryRequest
	if _state == State.FAILED:
		request = GameMemoryRequest.new(0, method, params, request_timeout)
		if _announcing:
			_unannounced.append(request) # resolves right after backend_failed, like a pending call
		else:
			_fail_unsent(request)
	else:
		request = _connection.request(method, params, request_timeout)
	# No copy: the result is the caller's own already. The connection builds it from the
	# answer's own parse (or GameMemoryError makes it) for this request alone, and the request
	# that also holds it is dropped here. Godot's duplicate(true) would cut a payload short at
	# about 100 levels, under the 128 the sidecar stores.
	return await request.wait()


# Returns whether a call that resolved with [param result] is announced by its signal: not
# while stop() runs, and not when it failed with STOPPED (stopped, restarted, or called
# outside the tree), so a node that is stopped, leaves the tree or is freed emits nothing.
func _may_announce(result: Dictionary) -> bool:
	var error: Variant = result.get("error")
	var code: int = int(error.get("code", 0)) if error is Dictionary else 0
	return not _stopping and code != GameMemoryError.STOPPED


func _discard_backend() -> void:
	_finish_unannounced()
	if _connection != null:
		_connection.opened.disconnect(_on_connection_opened)
		_connection.closed.disconnect(_on_backend_failed)
		_connection.notified.disconnect(_on_notified)
		_connection.close(GameMemoryError.make(GameMemoryError.STOPPED,
				"GameMemory was restarted before the answer came; send the request again"))
		_connection = null
	if _sidecar != null:
		_sidecar.started.disconnect(_on_sidecar_started)
		_sidecar.failed.disconnect(_on_backend_failed)
		_sidecar.stop() # a sidecar that still runs finishes its requests, then exits
		_sidecar = null


# Returns the launcher of a new sidecar (the engine tests return one with a fake process).
func _new_sidecar() -> GameMemorySidecar:
	return GameMemorySidecar.new()


func _on_sidecar_started(url: String, sidecar_token: String) -> void:
	if _state != State.LAUNCHING:
		return
	_state = State.CONNECTING
	_connection.open(url, sidecar_token, startup_timeout)


func _on_connection_opened(server_info: Dictionary) -> void:
	_server_info = server_info
	_state = State.READY
	backend_ready.emit()


func _on_backend_failed(error: Dictionary) -> void:
	if _state == State.IDLE or _state == State.FAILED:
		return
	_state = State.FAILED
	_last_error = error
	_server_info = {}
	if _sidecar != null:
		_sidecar.kill()
	if _starting:
		# Failed inside start(), maybe inside this node's _ready (autostart), which runs before
		# the game's own _ready could connect backend_failed: announce it when idle instead.
		_announcing = true
		_announce_failure.call_deferred(_connection, error)
		return
	_announce_failure(_connection, error)


func _announce_failure(failed_connection: GameMemoryConnection, error: Dictionary) -> void:
	if failed_connection != _connection or _state != State.FAILED:
		return # restarted or stopped since, which resolved the calls held for this failure
	# Announce before the pending requests resolve, so their awaiters see a failed backend.
	# A handler may call start(), which replaces _connection; the old one is closed below.
	backend_failed.emit(error)
	failed_connection.close(error)
	_finish_unannounced()


# Resolves the calls made while a failure waited to be announced, with that failure.
func _finish_unannounced() -> void:
	_announcing = false
	var held: Array[GameMemoryRequest] = _unannounced
	_unannounced = []
	for request: GameMemoryRequest in held:
		_fail_unsent(request)


func _fail_unsent(request: GameMemoryRequest) -> void:
	request.finish(GameMemoryError.failure(int(_last_error.get("code", 0)),
			"%s was not sent: %s" % [request.method, _last_error.get("message", "")]))


func _on_notified(method: String, params: Dictionary) -> void:
	if method == "memory.rebuild_progress":
		_connection.extend_deadlines("memory.rebuild")
		rebuild_progressed.emit(int(params.get("done", 0)), int(params.get("total", 0)))
	elif method == "memory.diagnostic":
		diagnostic_emitted.emit(GameMemoryCodec.diagnostic(params))
#endregion
