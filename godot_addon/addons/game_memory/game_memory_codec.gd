class_name GameMemoryCodec
extends RefCounted
## Converts between GDScript values and the bridge protocol's JSON shapes.
##
## Builds the params of each call from a method's arguments and its options dictionary,
## refusing unknown option keys with a message that lists the allowed ones. JSON numbers
## arrive as floats in GDScript, so the codec turns ranks, counts and error codes in results
## back into ints: [code]memory["moment"]["tick"] == 120[/code] compares as an int (ticks
## beyond 2^53 arrive as exact ints already, see [GameMemoryJson]).

#region Constants
## The option keys [method GameMemory.remember] accepts.
const REMEMBER_OPTIONS: Array[String] = [
	"kind",
	"scope",
	"importance",
	"tags",
	"payload",
	"memory_id",
	"expires_at",
	"source_input_id",
	"metadata",
	"belief_key",
]
## The option keys [method GameMemory.recall] accepts (and each query of
## [method GameMemory.recall_many], besides [code]owner_id[/code], [code]text[/code] and
## [code]at_or_before[/code]).
const RECALL_OPTIONS: Array[String] = [
	"limit",
	"scopes",
	"kinds",
	"tags",
	"minimum_importance",
	"require_semantic",
]
## How many memories a recall returns when the options do not say.
const DEFAULT_RECALL_LIMIT: int = 8
## The most queries one [method GameMemory.recall_many] call may carry.
const MAX_BATCH_QUERIES: int = 64
## Most memories in one [code]remember_many[/code] (the sidecar's bound).
const MAX_BATCH_MEMORIES: int = 256
const _QUERY_KEYS: Array[String] = ["owner_id", "text", "at_or_before"]
const _MEMORY_KEYS: Array[String] = ["owner_id", "text", "moment"]
const _STATUS_COUNTS: Array[String] = [
	"total_entries",
	"ready_entries",
	"pending_entries",
	"stale_entries",
	"orphan_entries",
]
const _MIGRATE_COUNTS: Array[String] = [
	"migrated_entries",
	"partitioned_entries",
	"vector_entries",
]
const _STAGE_COUNTS: Array[String] = ["scanned_count", "candidate_count"]
## The integer fields of a diagnostic's details (e.g. [code]memories_evicted[/code]).
const _DETAIL_COUNTS: Array[String] = ["count", "bound"]
## Options whose value is one id or name, a String.
const _STRING_OPTIONS: Array[String] = ["kind", "scope", "memory_id", "source_input_id",
		"belief_key"]
## Options whose value is a list of Strings.
const _STRING_LIST_OPTIONS: Array[String] = ["kinds", "scopes", "tags"]
## The int64 range a tick given as a float must lie in (as floats: -2^63 to 2^63).
const _TICK_MIN: float = -9223372036854775808.0
const _TICK_MAX: float = 9223372036854775808.0
const _WHY_INTS: Array[String] = ["lexical_rank", "vector_rank", "age_ticks"]
#endregion


#region Public methods
## Returns a copy of [param moment] ready to send: a whole-number float tick becomes an int.
static func wire_moment(moment: Dictionary) -> Dictionary:
	var copy: Dictionary = moment.duplicate(true)
	_to_int(copy, "tick")
	return copy


## Returns [code]{}[/code] when [param value] can be sent as the moment [param name], else a
## failed result that names it: a moment is a Dictionary, and its [code]tick[/code] a whole
## number in the 64-bit range (an int, or a whole float such as [code]2.0[/code]). A missing
## key is left for the sidecar to name.
static func moment_problem(value: Variant, name: String) -> Dictionary:
	if not value is Dictionary:
		return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
				"%s must be a moment Dictionary {\"timeline_id\": String, \"tick\": int}, got %s"
				% [name, type_string(typeof(value))])
	var moment: Dictionary = value
	if moment.has("tick") and not _is_tick(moment["tick"]):
		return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
				"%s.tick must be a whole number in the 64-bit range (an int), got %s %s"
				% [name, type_string(typeof(moment["tick"])), str(moment["tick"]).left(40)])
	return {}


## Returns [code]{"ok": true, "params": {...}}[/code] for [code]memory.remember[/code], or a
## failed result naming an unknown option or a value of the wrong type.
static func remember_params(session_id: String, owner_id: String, text: String,
		moment: Dictionary, options: Dictionary) -> Dictionary:
	var bad_moment: Dictionary = moment_problem(moment, "moment")
	if not bad_moment.is_empty():
		return bad_moment
	var params: Dictionary = {
		"session_id": session_id,
		"owner_id": owner_id,
		"text": text,
		"moment": wire_moment(moment),
	}
	var problem: Dictionary = _merge_options(params, options, REMEMBER_OPTIONS, "remember")
	if not problem.is_empty():
		return problem
	if params.get("expires_at") != null:
		var bad_expiry: Dictionary = moment_problem(params["expires_at"], "expires_at")
		if not bad_expiry.is_empty():
			return bad_expiry
		params["expires_at"] = wire_moment(params["expires_at"])
	return {"ok": true, "params": params}


## Returns [code]{"ok": true, "params": {...}}[/code] for [code]memory.recall[/code], or a
## failed result naming an unknown option. An empty [param owner_id] or [param text], or an
## empty [param at_or_before], is left out: the recall is then not narrowed by it.
static func recall_params(session_id: String, owner_id: String, text: String,
		at_or_before: Dictionary, options: Dictionary) -> Dictionary:
	var params: Dictionary = {"session_id": session_id, "limit": DEFAULT_RECALL_LIMIT}
	if not owner_id.is_empty():
		params["owner_id"] = owner_id
	if not text.is_empty():
		params["text"] = text
	if not at_or_before.is_empty():
		var bad_moment: Dictionary = moment_problem(at_or_before, "at_or_before")
		if not bad_moment.is_empty():
			return bad_moment
		params["at_or_before"] = wire_moment(at_or_before)
	var problem: Dictionary = _merge_options(params, options, RECALL_OPTIONS, "recall")
	if not problem.is_empty():
		return problem
	return {"ok": true, "params": params}


## Returns [code]{"ok": true, "params": {"queries": [...]}}[/code] for
## [code]memory.recall_many[/code], or a failed result naming the first bad query.
static func recall_many_params(session_id: String, queries: Array) -> Dictionary:
	if queries.is_empty() or queries.size() > MAX_BATCH_QUERIES:
		return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
				"recall_many takes 1 to %d queries, got %d; split the batch"
				% [MAX_BATCH_QUERIES, queries.size()])
	var wire: Array = []
	for index: int in queries.size():
		var query: Variant = queries[index]
		if not query is Dictionary:
			return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
					"recall_many query %d is not a Dictionary (got %s); give each query "
					% [index, type_string(typeof(query))] + "owner_id, text and at_or_before")
		var options: Dictionary = query.duplicate()
		for key: String in _QUERY_KEYS:
			options.erase(key)
		var fields: Dictionary = _batch_fields(query, _QUERY_KEYS)
		var built: Dictionary = fields
		if fields["ok"]:
			built = recall_params(session_id, fields["owner_id"], fields["text"],
					fields["at_or_before"], options)
		if not built["ok"]:
			built["error"]["message"] = "query %d: %s" % [index, built["error"]["message"]]
			return built
		wire.append(built["params"])
	return {"ok": true, "params": {"queries": wire}}


## Returns [code]{"ok": true, "params": {"memories": [...]}}[/code] for
## [code]memory.remember_many[/code], or a failed result naming the first bad entry.
static func remember_many_params(session_id: String, entries: Array) -> Dictionary:
	if entries.is_empty() or entries.size() > MAX_BATCH_MEMORIES:
		return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
				"remember_many takes 1 to %d memories, got %d; split the batch"
				% [MAX_BATCH_MEMORIES, entries.size()])
	var wire: Array = []
	for index: int in entries.size():
		var entry: Variant = entries[index]
		if not entry is Dictionary:
			return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
					"remember_many entry %d is not a Dictionary (got %s); give each entry "
					% [index, type_string(typeof(entry))] + "owner_id, text and moment")
		var options: Dictionary = entry.duplicate()
		for key: String in _MEMORY_KEYS:
			options.erase(key)
		var fields: Dictionary = _batch_fields(entry, _MEMORY_KEYS)
		var built: Dictionary = fields
		if fields["ok"]:
			built = remember_params(session_id, fields["owner_id"], fields["text"],
					fields["moment"], options)
		if not built["ok"]:
			built["error"]["message"] = "entry %d: %s" % [index, built["error"]["message"]]
			return built
		wire.append(built["params"])
	return {"ok": true, "params": {"memories": wire}}


## Returns [code]{"ok": true, "params": {...}}[/code] for [code]memory.erase[/code] of
## [param owner_id], or a failed result naming [code]memory_ids[/code]. [param memory_ids]
## [code]null[/code] sends no list: every memory of the NPC goes. A list (a
## [PackedStringArray], or an [Array] of Strings) is sent as it is, even empty: the sidecar
## then erases only those, so an empty list erases nothing rather than the whole NPC.
static func erase_owner_params(session_id: String, owner_id: String,
		memory_ids: Variant) -> Dictionary:
	var params: Dictionary = {"session_id": session_id, "owner_id": owner_id}
	if typeof(memory_ids) == TYPE_NIL:
		return {"ok": true, "params": params}
	if not (memory_ids is Array or memory_ids is PackedStringArray):
		return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
				"erase_owner memory_ids must be a PackedStringArray or an Array of Strings "
				+ "(omit it to erase every memory of the NPC), got %s %s"
				% [type_string(typeof(memory_ids)), str(memory_ids).left(40)])
	var items: Array = Array(memory_ids)
	var wire: Array = []
	for index: int in items.size():
		if not _is_text(items[index]):
			return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
					"erase_owner memory_ids[%d] must be a String, got %s %s"
					% [index, type_string(typeof(items[index])), str(items[index]).left(40)])
		wire.append(str(items[index]))
	params["memory_ids"] = wire
	return {"ok": true, "params": params}


## Returns [param value] as a memory dictionary with int ticks and ranks (empty when it is not
## a dictionary).
static func memory(value: Variant) -> Dictionary:
	if not value is Dictionary:
		return {}
	var item: Dictionary = value
	for key: String in ["moment", "expires_at"]:
		if item.get(key) is Dictionary:
			_to_int(item[key], "tick")
	if item.get("why") is Dictionary:
		for key: String in _WHY_INTS:
			_to_int(item["why"], key)
	return item


## Normalizes a recall result in place ([code]memories[/code] and [code]stages[/code], or the
## error code of a failed one, such as a failed [code]recall_many[/code] entry) and returns it.
static func recall_result(result: Dictionary) -> Dictionary:
	if not result.get("ok", false):
		if result.get("error") is Dictionary:
			_to_int(result["error"], "code")
		return result
	var memories: Array = []
	var raw_memories: Variant = result.get("memories", [])
	if raw_memories is Array:
		for item: Variant in raw_memories:
			memories.append(memory(item))
	result["memories"] = memories
	var stages: Variant = result.get("stages", [])
	if stages is Array:
		for stage: Variant in stages:
			if stage is Dictionary:
				for key: String in _STAGE_COUNTS:
					_to_int(stage, key)
	else:
		result["stages"] = []
	result["fallback"] = bool(result.get("fallback", false))
	return result


## Normalizes a status (or rebuild) result in place, making its counts ints, and returns it.
static func status_result(result: Dictionary) -> Dictionary:
	for key: String in _STATUS_COUNTS:
		_to_int(result, key)
	return result


## Returns the params of a [code]memory.diagnostic[/code] notification with the counts in its
## [code]details[/code] as ints.
static func diagnostic(params: Dictionary) -> Dictionary:
	if params.get("details") is Dictionary:
		for key: String in _DETAIL_COUNTS:
			_to_int(params["details"], key)
	return params


## Returns the [code]owner_id[/code] of a [method GameMemory.recall_many] query as
## [method recall_many_params] sends it: "" when it is absent or null.
static func query_owner(query: Variant) -> String:
	if not query is Dictionary or query.get("owner_id") == null:
		return ""
	return str(query["owner_id"])


## Normalizes a migrate result in place, making its counts ints, and returns it.
static func migrate_result(result: Dictionary) -> Dictionary:
	for key: String in _MIGRATE_COUNTS:
		_to_int(result, key)
	return result
#endregion


#region Private methods
static func _merge_options(params: Dictionary, options: Dictionary, allowed: Array[String],
		method: String) -> Dictionary:
	for key: Variant in options:
		if not key is String or not allowed.has(key):
			return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
					"%s got an unknown option %s; allowed options are: %s"
					% [method, JSON.stringify(key), ", ".join(PackedStringArray(allowed))])
		var problem: String = _option_problem(key, options[key])
		if not problem.is_empty():
			return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
					"%s option %s" % [method, problem])
		params[key] = options[key]
	return {}


# Returns why the option [param key] cannot take [param value] (a kind given as an int, which
# the sidecar would read as another kind), or "".
static func _option_problem(key: String, value: Variant) -> String:
	if _STRING_OPTIONS.has(key) and not _is_text(value):
		return "%s must be a String, got %s %s" % [key, type_string(typeof(value)),
				str(value).left(40)]
	if _STRING_LIST_OPTIONS.has(key) and (value is Array or value is PackedStringArray):
		var items: Array = Array(value)
		for index: int in items.size():
			if not _is_text(items[index]):
				return "%s[%d] must be a String, got %s %s" % [key, index,
						type_string(typeof(items[index])), str(items[index]).left(40)]
	return ""


# Returns owner_id and text (Strings; absent or null: "") and the moment (a Dictionary;
# absent or null: {}) of a batch item with the keys [param keys], or a failed result naming
# the one of the wrong type.
static func _batch_fields(item: Dictionary, keys: Array[String]) -> Dictionary:
	var fields: Dictionary = {"ok": true}
	for key: String in keys:
		var value: Variant = item.get(key)
		var is_moment: bool = key == "moment" or key == "at_or_before"
		if value == null:
			fields[key] = {} if is_moment else ""
		elif is_moment and value is Dictionary:
			fields[key] = value
		elif not is_moment and _is_text(value):
			fields[key] = str(value)
		else:
			var expected: String = "a moment Dictionary" if is_moment else "a String"
			return GameMemoryError.failure(GameMemoryError.INVALID_PARAMS,
					"%s must be %s, got %s %s" % [key, expected, type_string(typeof(value)),
					str(value).left(40)])
	return fields


static func _is_text(value: Variant) -> bool:
	return value is String or value is StringName


static func _is_tick(value: Variant) -> bool:
	if value is int:
		return true
	return value is float and is_finite(value) and value == floorf(value) \
			and value >= _TICK_MIN and value < _TICK_MAX


# Makes target[key] an int when it is a whole float in the 64-bit range (beyond it, an int
# would wrap; such a value stays a float).
static func _to_int(target: Dictionary, key: String) -> void:
	var value: Variant = target.get(key)
	if value is float and _is_tick(value):
		target[key] = int(value)
#endregion
