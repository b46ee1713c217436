class_name GameMemoryJson
extends RefCounted
## Writes and reads the bridge's JSON text exactly, where Godot's [JSON] alone would not.
##
## [method unsendable] says why a value cannot be written as JSON at all, naming where it is.
## [method stringify] is [method JSON.stringify] without its invalid output: Godot writes the
## control characters U+0001 to U+001F other than [code]\b \f \n \r \t[/code] raw, and U+000B
## as the escape [code]\v[/code], which JSON does not have (Godot issue #109482); the sidecar
## would refuse the whole message. Here they become [code]\u00XX[/code] escapes, so any text a
## game holds (pasted, or written by a dialogue model) arrives as it is. Floats are written
## with full precision (up to 17 significant digits, enough for a strict parser such as the
## sidecar's to read exactly the same float), not Godot's default 14 digits, which turned
## [constant PI] into 3.14159265358979 and 1e-40 into 0.0.
## [br][br]
## [method parse] is [method JSON.parse], except that the integers under the keys of
## [constant EXACT_INT_KEYS] come back exact: Godot's parser reads every JSON number as a
## float, which rounds an integer beyond 2^53 (9007199254740993 becomes 9007199254740992.0).
## Other numbers are Godot's reading, which for about half of all floats is a few floats off
## the digits (its decimal reader rounds imperfectly), and far off below about 1e-290.

#region Constants
## How deep a value may nest before [method unsendable] refuses it (the sidecar allows a
## payload 128 levels; a deeper structure cannot be checked or stringified safely).
const MAX_DEPTH: int = 160
## The keys whose integer values [method parse] returns exactly: game ticks and tick
## differences, the int64 values of the bridge's results.
const EXACT_INT_KEYS: Array[String] = ["tick", "age_ticks"]
## The control characters Godot's JSON writer leaves raw (all of U+0001 to U+001F but
## [code]\b \t \n \v \f \r[/code]; a Godot String cannot hold U+0000).
const _RAW_CONTROLS: Array[int] = [
	1, 2, 3, 4, 5, 6, 7, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
	30, 31,
]
## The largest int64, as digits (its negative counterpart is one more).
const _INT64_MAX_DIGITS: String = "9223372036854775807"
const _INT64_MIN_DIGITS: String = "9223372036854775808"
#endregion


#region Static variables
# Something to fix: a raw control character, or a backslash and a v (perhaps an escaped
# backslash before a v, which the exact pattern below then leaves alone).
static var _suspect: RegEx = RegEx.create_from_string("[\\x01-\\x08\\x0e-\\x1f]|\\\\v")
# The escape \v: an odd run of backslashes (not preceded by another) and a v. Every
# backslash Godot writes starts an escape, so an even run is escaped backslashes.
static var _vertical_tab: RegEx = RegEx.create_from_string(
		"(?<!\\\\)((?:\\\\\\\\)*)\\\\v")
# A key of EXACT_INT_KEYS right after { or , (so never inside a string, where every quote
# is escaped) with an integer value of 16 digits or more (fewer are exact as floats).
static var _long_int: RegEx = RegEx.create_from_string(
		"([{,]\\s*\"(?:%s)\"\\s*:\\s*)(-?[0-9]{16,})(?=\\s*[,}])" % "|".join(EXACT_INT_KEYS))
#endregion


#region Public methods
## Returns [param value] as JSON text that any strict parser reads back unchanged: like
## [method JSON.stringify] with full precision (a finite float is written with the digits a
## strict parser reads back as exactly that float), with control characters written as
## [code]\u00XX[/code].
static func stringify(value: Variant) -> String:
	var text: String = JSON.stringify(value, "", true, true)
	if _suspect.search(text) == null:
		return text
	text = _vertical_tab.sub(text, "$1\\u000b", true)
	for code: int in _RAW_CONTROLS:
		var raw: String = String.chr(code)
		if text.contains(raw):
			text = text.replace(raw, "\\u%04x" % code)
	return text


## Returns why [param value] (named [param path] in the message, e.g. [code]params[/code])
## cannot be written as JSON, or "" when it can: a NaN or infinite number, an engine type
## such as Vector2, a [PackedByteArray] (Godot would write it as the text
## [code]"[1, 2, 3]"[/code]), an Object, a key that is not a String, a dictionary or array
## that contains itself, or nesting deeper than [constant MAX_DEPTH].
static func unsendable(value: Variant, path: String) -> String:
	return _unsendable(value, path, [])


## Parses [param text]. Returns [code]{"ok": true, "value": Variant}[/code], where the values
## under [constant EXACT_INT_KEYS] that are integers in the 64-bit range are exact [int]s
## (larger ones stay floats), or [code]{"ok": false, "error": String}[/code].
static func parse(text: String) -> Dictionary:
	var json: JSON = JSON.new()
	if json.parse(text) != OK:
		return {"ok": false, "error": json.get_error_message()}
	var value: Variant = json.data
	if _long_int.search(text) != null:
		# Parse again with those integers quoted, and take their digits from that copy.
		var exact: JSON = JSON.new()
		if exact.parse(_long_int.sub(text, "$1\"$2\"", true)) == OK:
			value = _restore(value, exact.data)
	return {"ok": true, "value": value}
#endregion


#region Private methods
# Returns why [param value] (at [param path]) cannot be sent as JSON, or "" when it can.
# [param parents] are the dictionaries and arrays that contain it.
static func _unsendable(value: Variant, path: String, parents: Array) -> String:
	match typeof(value):
		TYPE_NIL, TYPE_BOOL, TYPE_INT, TYPE_STRING, TYPE_STRING_NAME, TYPE_PACKED_INT32_ARRAY, \
				TYPE_PACKED_INT64_ARRAY, TYPE_PACKED_STRING_ARRAY:
			return ""
		TYPE_PACKED_BYTE_ARRAY:
			# JSON.stringify writes it as the text "[1, 2, 3]", which would be stored as text.
			return "%s is a PackedByteArray, which JSON cannot carry; give Array(bytes) for " \
					% path + "a list of numbers, or Marshalls.raw_to_base64(bytes) for text"
		TYPE_FLOAT:
			return "" if is_finite(value) else "%s is NaN or infinite, which JSON cannot " % path \
					+ "carry; give a finite number"
		TYPE_PACKED_FLOAT32_ARRAY, TYPE_PACKED_FLOAT64_ARRAY:
			var numbers: Array = Array(value)
			for index: int in numbers.size():
				if not is_finite(numbers[index]):
					return "%s[%d] is NaN or infinite, which JSON cannot carry; give a finite " \
							% [path, index] + "number"
			return ""
		TYPE_DICTIONARY, TYPE_ARRAY:
			return _unsendable_in(value, path, parents)
	return "%s is a %s, which JSON cannot carry; give a String, a number, a bool, null, " \
			% [path, type_string(typeof(value))] + "an Array or a Dictionary (convert it first)"


static func _unsendable_in(container: Variant, path: String, parents: Array) -> String:
	for parent: Variant in parents:
		if is_same(parent, container):
			return "%s contains itself, which JSON cannot carry; send a copy without the " % path \
					+ "loop"
	if parents.size() >= MAX_DEPTH:
		return "%s nests more than %d levels deep; flatten it" % [path, MAX_DEPTH]
	parents.push_back(container)
	var found: String = ""
	if container is Dictionary:
		var dictionary: Dictionary = container
		for key: Variant in dictionary:
			if not key is String and not key is StringName:
				found = "%s has a key %s that is a %s; JSON keys are Strings, give it as one" \
						% [path, str(key).left(40), type_string(typeof(key))]
			else:
				found = _unsendable(dictionary[key], "%s.%s" % [path, key], parents)
			if not found.is_empty():
				break
	else:
		var array: Array = container
		for index: int in array.size():
			found = _unsendable(array[index], "%s[%d]" % [path, index], parents)
			if not found.is_empty():
				break
	parents.pop_back()
	return found


# Returns [param plain] with every float that [param quoted] (the same document parsed with
# long integers quoted) holds as digits replaced by the exact int.
static func _restore(plain: Variant, quoted: Variant) -> Variant:
	if plain is Dictionary and quoted is Dictionary:
		var object: Dictionary = plain
		var twin: Dictionary = quoted
		for key: Variant in object:
			object[key] = _restore(object[key], twin.get(key))
		return object
	if plain is Array and quoted is Array and plain.size() == quoted.size():
		var array: Array = plain
		var copy: Array = quoted
		for index: int in array.size():
			array[index] = _restore(array[index], copy[index])
		return array
	if plain is float and quoted is String:
		return _exact_int(quoted, plain)
	return plain


# Returns [param digits] as an int when it is one in the 64-bit range, else [param fallback].
static func _exact_int(digits: String, fallback: float) -> Variant:
	var negative: bool = digits.begins_with("-")
	var magnitude: String = digits.trim_prefix("-")
	var limit: String = _INT64_MIN_DIGITS if negative else _INT64_MAX_DIGITS
	if not magnitude.is_valid_int() or magnitude.length() > limit.length():
		return fallback
	if magnitude.length() == limit.length() and magnitude > limit:
		return fallback
	if negative and magnitude == _INT64_MIN_DIGITS:
		return -9223372036854775807 - 1
	return digits.to_int()
#endregion
