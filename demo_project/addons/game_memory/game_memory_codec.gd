class_name GameMemoryCodec
extends RefCounted
## Converts between GDScript values and the bridge protocol's JSON shapes.
##
## Builds the params of each call from a method's arguments and its options dictionary,
## refusing unknown option keys with a message that lists the allowed ones. JSON numbers
## arrive as floats in GDScript, so the codec turns ticks, ranks and counts in results back into
## ints: [code]memory["moment"]["tick"] == 120[/code] compares as an int.

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
const _WHY_INTS: Array[String] = ["lexical_rank", "vector_rank", "age_ticks"]
#endregion


#region Public methods
## Returns a copy of [param moment] ready to send: a whole-number float tick becomes an int.
static func wire_moment(moment: Dictionary) -> Dictionary:
	var copy: Dictionary = moment.duplicate(true)
	_to_int(copy, "tick")
	return copy


## Returns [code]{"ok": true, "params": {...}}[/code] for [code]memory.remember[/code], or a
## failed result naming an unknown option.
static func remember_params(session_id: String, owner_id: String, text: String,
		moment: Dictionary, options: Dictionary) -> Dictionary:
	var params: Dictionary = {
		"session_id": session_id,
		"owner_id": owner_id,
		"text": text,
		"moment": wire_moment(moment),
	}
	var problem: Dictionary = _merge_options(params, options, REMEMBER_OPTIONS, "remember")
	if not problem.is_empty():
		return problem
	if params.get("expires_at") is Dictionary:
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
		var moment: Variant = query.get("at_or_before", {})
		var built: Dictionary = recall_params(session_id, str(query.get("owner_id", "")),
				str(query.get("text", "")), moment if moment is Dictionary else {}, options)
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
		var moment: Variant = entry.get("moment", {})
		var built: Dictionary = remember_params(session_id, str(entry.get("owner_id", "")),
				str(entry.get("text", "")), moment if moment is Dictionary else {}, options)
		if not built["ok"]:
			built["error"]["message"] = "entry %d: %s" % [index, built["error"]["message"]]
			return built
		wire.append(built["params"])
	return {"ok": true, "params": {"memories": wire}}


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


## Normalizes a recall result in place ([code]memories[/code] and [code]stages[/code]) and
## returns it.
static func recall_result(result: Dictionary) -> Dictionary:
	if not result.get("ok", false):
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
		params[key] = options[key]
	return {}


static func _to_int(target: Dictionary, key: String) -> void:
	var value: Variant = target.get(key)
	if value is float and is_finite(value) and value == floorf(value):
		target[key] = int(value)
#endregion
