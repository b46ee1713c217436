extends EngineTest
## What a game sends comes back exactly: text with control characters, ticks past 2^53,
## integer error codes and counts.
##
## Godot's JSON writer leaves most control characters raw and writes U+000B as an invalid
## [code]\v[/code] (Godot issue #109482), and its parser reads every number as a float (so
## 9007199254740993 would come back as 9007199254740992). The sidecar runs with
## [code]--maximum-memories-per-owner 6[/code], so remembering a seventh memory of one NPC
## sends a [code]memories_evicted[/code] diagnostic with counts in its details.

const INT64_MAX: int = 9223372036854775807
const INT64_MIN: int = -9223372036854775807 - 1
## 2^53 + 1, a nanosecond timestamp, and both ends of the 64-bit range.
const TICKS: Array[int] = [9007199254740993, 1700000000123456789, INT64_MAX, INT64_MIN]
const RETENTION_BOUND: int = 6


func run() -> void:
	var memory: GameMemory = make_memory({"request_timeout": 3.0})
	check("backend_ready", await wait_ready(memory))
	_check_the_json_writer_and_reader()
	await _check_control_characters_reach_the_sidecar(memory)
	await _check_ticks_past_2_53_come_back_exact(memory)
	await _check_recall_many_entries_have_int_codes(memory)
	await _check_diagnostic_counts_are_ints(memory)


func _check_the_json_writer_and_reader() -> void:
	var texts: Array[String] = ["a\u0001b", "v\u000bw", "x\u001fy", "n\nt\tb\bf\fr\r",
			"back\\v", "back\\\u000b", "del\u007f", "quote\"\u0002"]
	var exact: bool = true
	var valid: bool = true
	for text: String in texts:
		var written: String = GameMemoryJson.stringify({"t": text})
		exact = exact and JSON.parse_string(written) == {"t": text}
		for code: int in range(1, 32):
			valid = valid and not written.contains(String.chr(code))
		valid = valid and not written.replace("\\\\", "").contains("\\v")
	check("stringify_escapes_every_control_character", valid)
	check("stringify_round_trips_every_text", exact)

	var document: String = JSON.stringify({
		"moment": {"tick": 1},
		"why": {"age_ticks": 2},
		"text": "{\"tick\":12345678901234567}",
		"list": [{"tick": 3}],
		"far": {"tick": 4},
		"small": {"tick": 5},
		"other": 6,
	}).replace(":1}", ":9007199254740993}").replace(":2}", ":-9223372036854775808}") \
			.replace(":3}", ": 1700000000123456789 }").replace(":4}", ":18446744073709551615}") \
			.replace(":6}", ":9007199254740993}")
	var parsed: Dictionary = GameMemoryJson.parse(document)
	var value: Dictionary = parsed.get("value", {})
	check("parse_keeps_long_ticks_exact", parsed["ok"]
			and typeof(value["moment"]["tick"]) == TYPE_INT
			and value["moment"]["tick"] == 9007199254740993
			and value["why"]["age_ticks"] == INT64_MIN
			and value["list"][0]["tick"] == 1700000000123456789, {"value": str(value)})
	check("parse_leaves_text_and_other_numbers_alone", parsed["ok"]
			and value["text"] == "{\"tick\":12345678901234567}"
			and typeof(value["far"]["tick"]) == TYPE_FLOAT
			and typeof(value["small"]["tick"]) == TYPE_FLOAT
			and typeof(value["other"]) == TYPE_FLOAT, {"value": str(value)})


func _check_control_characters_reach_the_sidecar(memory: GameMemory) -> void:
	var text: String = "The bard\u0001 sang\u000b of\u001f the\ttide\u0007."
	var stored: Dictionary = await memory.remember("bard", text, moment(4),
			{"memory_id": "song", "payload": {"line": "\u0002\u000b"}})
	check("text_with_control_characters_is_stored", stored["ok"], {"result": stored})
	check("it_comes_back_unchanged", stored["ok"] and stored["memory"]["text"] == text
			and stored["memory"]["payload"] == {"line": "\u0002\u000b"},
			{"memory": stored.get("memory")})
	var found: Dictionary = await memory.recall("bard", "", {})
	check("it_is_recalled_unchanged", found["ok"] and found["memories"].size() == 1
			and found["memories"][0]["text"] == text, {"result": found})


func _check_ticks_past_2_53_come_back_exact(memory: GameMemory) -> void:
	var echoed: bool = true
	var typed: bool = true
	for tick: int in TICKS:
		var stored: Dictionary = await memory.remember("clock", "The clock struck at %d." % tick,
				{"timeline_id": "main", "tick": tick}, {"memory_id": "tick-%d" % tick})
		var got: Variant = stored.get("memory", {}).get("moment", {}).get("tick")
		echoed = echoed and stored["ok"] and got == tick
		typed = typed and typeof(got) == TYPE_INT
		if not stored["ok"] or got != tick:
			note("tick_echo", {"sent": str(tick), "got": str(got), "result": stored})
	check("remember_echoes_every_tick_exactly", echoed)
	check("echoed_ticks_are_ints", typed)

	var expiring: Dictionary = await memory.remember("clock", "The bell will crack.",
			{"timeline_id": "main", "tick": 9007199254740993},
			{"memory_id": "bell", "expires_at": {"timeline_id": "main", "tick": 9007199254740995}})
	check("expiry_ticks_come_back_exact", expiring["ok"]
			and expiring["memory"]["expires_at"]["tick"] == 9007199254740995,
			{"result": expiring})

	var found: Dictionary = await memory.recall("clock", "", {"timeline_id": "main",
			"tick": INT64_MAX}, {"limit": 10})
	var by_id: Dictionary = {}
	for item: Dictionary in found.get("memories", []):
		by_id[item["memory_id"]] = item
	var recalled: bool = found["ok"]
	var ages: bool = found["ok"]
	for tick: int in TICKS:
		var item: Dictionary = by_id.get("tick-%d" % tick, {})
		recalled = recalled and item.get("moment", {}).get("tick") == tick
		if tick != INT64_MIN:
			ages = ages and item.get("why", {}).get("age_ticks") == INT64_MAX - tick
	check("recalled_ticks_are_exact", recalled, {"ticks": _ticks_of(found)})
	check("age_ticks_are_exact", ages, {"ticks": _ticks_of(found)})
	var widest: Variant = by_id.get("tick-%d" % INT64_MIN, {}).get("why", {}).get("age_ticks")
	check("an_age_beyond_64_bits_stays_a_float", typeof(widest) == TYPE_FLOAT
			and widest > 1.8e19, {"age_ticks": str(widest)})


func _check_recall_many_entries_have_int_codes(memory: GameMemory) -> void:
	var owners: Array = []
	memory.memory_recalled.connect(func(owner_id: String, _memories: Array) -> void:
		owners.append(owner_id))
	var batch: Dictionary = await memory.recall_many([
		{"owner_id": "bard", "text": "tide", "at_or_before": moment(10), "limit": 1000},
		{"owner_id": null, "text": "tide", "at_or_before": moment(10)},
	])
	var entry: Dictionary = batch.get("results", [{}])[0]
	var code: Variant = entry.get("error", {}).get("code")
	var matched: bool = false
	match code:
		GameMemoryError.INVALID_PARAMS:
			matched = true
	check("a_failed_recall_many_entry_has_an_int_code", batch["ok"]
			and typeof(code) == TYPE_INT and matched, {"entry": entry})
	check("a_null_owner_is_reported_as_empty", owners == [""], {"owners": owners})


func _check_diagnostic_counts_are_ints(memory: GameMemory) -> void:
	var normalized: Dictionary = GameMemoryCodec.diagnostic(
			{"code": "memories_evicted", "details": {"count": 3.0, "bound": 10.0, "kind": "x"}})
	check("diagnostic_detail_counts_become_ints",
			typeof(normalized["details"]["count"]) == TYPE_INT
			and typeof(normalized["details"]["bound"]) == TYPE_INT)
	var diagnostics: Array = []
	memory.diagnostic_emitted.connect(func(diagnostic: Dictionary) -> void:
		diagnostics.append(diagnostic))
	for index: int in RETENTION_BOUND + 1:
		await memory.remember("hoarder", "Trinket number %d." % index, moment(index))
	await wait_until(func() -> bool: return not diagnostics.is_empty(), 5.0)
	var evicted: Dictionary = {}
	for diagnostic: Dictionary in diagnostics:
		if diagnostic.get("code") == "memories_evicted":
			evicted = diagnostic
	var details: Variant = evicted.get("details")
	check("an_eviction_diagnostic_has_int_counts", details is Dictionary
			and typeof(details.get("count")) == TYPE_INT
			and details.get("bound") == RETENTION_BOUND, {"diagnostics": diagnostics})


func _ticks_of(result: Dictionary) -> Array:
	var ticks: Array = []
	for item: Dictionary in result.get("memories", []):
		ticks.append([item.get("memory_id"), str(item.get("moment", {}).get("tick")),
				str(item.get("why", {}).get("age_ticks"))])
	return ticks
