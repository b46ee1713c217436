extends EngineTest
## Floats in a payload are sent with full precision, so the sidecar stores them exactly; a
## PackedByteArray is refused.
##
## Godot's JSON writer keeps 14 significant digits unless asked for full precision (PI was
## stored as 3.14159265358979, 1e-40 as 0.0). Godot writes a PackedByteArray as the text
## "[1, 2, 3]", which the sidecar would store as text. The floats' bits and the JSON text
## GameMemoryJson writes for them are printed (GMTEST_NOTE "sent"), so pytest compares both
## with its own JSON reader and with what the sidecar stored: Godot's reader is no judge, as
## it reads many decimals a float or so off their digits.

## The owner whose memory holds the floats; pytest recalls it.
const OWNER: String = "surveyor"
## How many random floats (of every magnitude, from random bits) the payload holds, and how
## many of a game's sizes.
const RANDOM_COUNT: int = 400


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	await _check_the_auditors_floats_come_back(memory)
	await _store_random_floats(memory)
	await _check_byte_arrays_are_refused(memory)


# The floats of the audit's report, which Godot's reader happens to read exactly.
func _check_the_auditors_floats_come_back(memory: GameMemory) -> void:
	var sent: Dictionary = {"pi": PI, "third": 1.0 / 3.0, "sum": 0.1 + 0.2, "tiny": 1e-40}
	var stored: Dictionary = await memory.remember("cartographer", "The map's scale.",
			moment(1), {"payload": sent, "importance": 1.0 / 3.0})
	check("the_auditors_floats_are_stored", stored["ok"], {"result": stored})
	var found: Dictionary = await memory.recall("cartographer", "", moment(2))
	var recalled: Dictionary = found["memories"][0] \
			if found["ok"] and found["memories"].size() == 1 else {}
	check("they_come_back_exactly", not recalled.is_empty()
			and recalled["payload"] == sent and recalled["importance"] == 1.0 / 3.0
			and stored["memory"]["payload"] == sent, {"result": found})


func _store_random_floats(memory: GameMemory) -> void:
	var values: Array = _floats()
	var bits: Array = []
	for value: float in values:
		bits.append(_bits_of(value))
	note("sent", {"owner": OWNER, "bits": bits, "written": GameMemoryJson.stringify(values)})
	var stored: Dictionary = await memory.remember(OWNER, "The survey of the marsh.", moment(1),
			{"payload": {"floats": values}})
	check("random_floats_are_stored", stored["ok"], {"result": stored})


func _check_byte_arrays_are_refused(memory: GameMemory) -> void:
	check("a_byte_array_is_unsendable", GameMemoryJson.unsendable(
			{"b": PackedByteArray([1, 2, 3])}, "params").contains("params.b is a PackedByteArray"))
	var in_payload: Dictionary = await memory.remember("smith", "A sealed letter.", moment(3),
			{"payload": {"seal": PackedByteArray([1, 2, 3])}})
	check("a_byte_array_in_a_payload_is_refused", code_of(in_payload)
			== GameMemoryError.INVALID_PARAMS
			and message_of(in_payload).contains("params.payload.seal is a PackedByteArray"),
			{"result": in_payload})
	var in_metadata: Dictionary = await memory.remember("smith", "A sealed letter.", moment(3),
			{"metadata": {"seal": PackedByteArray([1, 2, 3])}})
	check("a_byte_array_in_metadata_is_refused", code_of(in_metadata)
			== GameMemoryError.INVALID_PARAMS
			and message_of(in_metadata).contains("params.metadata.seal is a PackedByteArray"),
			{"result": in_metadata})
	var converted: Dictionary = await memory.remember("smith", "A sealed letter.", moment(3),
			{"payload": {"seal": Array(PackedByteArray([1, 2, 3]))}})
	check("converted_with_array_it_is_stored_as_numbers", converted["ok"]
			and converted["memory"]["payload"].get("seal") == [1.0, 2.0, 3.0],
			{"result": converted})
	var found: Dictionary = await memory.recall("smith", "", moment(4))
	check("nothing_was_stored_as_text", found["ok"] and found["memories"].size() == 1,
			{"result": found})


# Returns RANDOM_COUNT finite floats of every magnitude (from random bits; the smallest and
# the largest included) and RANDOM_COUNT of a game's sizes.
func _floats() -> Array:
	var values: Array = [_from_bits(1), _from_bits(0x7FEFFFFFFFFFFFFF),
			_from_bits(0x0010000000000000), -TAU]
	var random: RandomNumberGenerator = RandomNumberGenerator.new()
	random.seed = 1616
	while values.size() < RANDOM_COUNT:
		var value: float = _from_bits((random.randi() << 32) | random.randi())
		if is_finite(value):
			values.append(value)
	for index: int in RANDOM_COUNT:
		values.append(random.randf_range(-5000.0, 5000.0) * 0.1)
	return values


func _bits_of(value: float) -> int:
	var bytes: PackedByteArray = PackedByteArray()
	bytes.resize(8)
	bytes.encode_double(0, value)
	return bytes.decode_s64(0)


func _from_bits(bits: int) -> float:
	var bytes: PackedByteArray = PackedByteArray()
	bytes.resize(8)
	bytes.encode_s64(0, bits)
	return bytes.decode_double(0)
