extends RefCounted
## What the export plugin does with the sidecar bundle, as plain functions over paths.
##
## [method plan_export] decides, from an export preset's feature tags and the bundle's
## manifest ([code]game-memory-bundle.json[/code]), whether to copy the bundle folder beside
## the exported executable (Windows, Linux), hand it to the macOS app bundle, or skip it
## (web, Android, iOS: the node cannot launch processes there). [method copy_bundle] copies
## the folder, keeping Unix permissions (the sidecar must stay executable) and symbolic links,
## and replaces an older bundle at the destination but never a folder that is not a bundle.
## It uses no editor class, so the engine tests run it in the web runtime; the export plugin
## ([code]export_plugin.gd[/code]) only calls it.

#region Constants
## The project setting naming the bundle folder the export copies.
const BUNDLE_FOLDER_SETTING: String = "game_memory/sidecar/bundle_folder"
## Its default: [code]game-memory bundle --output <project folder>[/code] writes it there.
const DEFAULT_BUNDLE_FOLDER: String = "res://game-memory"
## The bundle's manifest, at the top of the bundle folder.
const MANIFEST_NAME: String = "game-memory-bundle.json"
## The folder name of a bundle, beside the exported executable.
const BUNDLE_FOLDER: String = "game-memory"
## The addon's editor-only folder, left out of exported games.
const EDITOR_FOLDER: String = "res://addons/game_memory/editor/"
## Feature tags of the export targets the node cannot launch a sidecar on.
const NO_PROCESS_FEATURES: Array[String] = ["web", "android", "ios"]
## Godot's OS feature tag for each platform name of a bundle manifest.
const OS_FEATURES: Dictionary = {"linux": "linux", "windows": "windows", "macos": "macos"}
#endregion


#region Public methods
## Turns the value of [constant BUNDLE_FOLDER_SETTING] into an absolute folder:
## [code]res://[/code] paths are globalized and a relative path is relative to
## [param project_folder].
static func resolve_bundle_folder(value: String, project_folder: String) -> String:
	var path: String = value.strip_edges()
	if path.begins_with("res://") or path.begins_with("user://"):
		return ProjectSettings.globalize_path(path).simplify_path()
	if path.is_relative_path():
		return project_folder.path_join(path).simplify_path()
	return path.simplify_path()


## Reads the manifest of the bundle folder [param folder]: [code]{"ok": true, "manifest"}[/code]
## or a failed result that says what is wrong and how to build a bundle.
static func read_manifest(folder: String) -> Dictionary:
	var path: String = folder.path_join(MANIFEST_NAME)
	if not FileAccess.file_exists(path):
		return _failure("%s is not a game-memory bundle (it has no %s); build one with "
				% [folder, MANIFEST_NAME] + "`game-memory bundle --output <project folder>`")
	var json: JSON = JSON.new()
	if json.parse(FileAccess.get_file_as_string(path)) != OK or not json.data is Dictionary:
		return _failure("%s is not valid JSON; build the bundle again" % path)
	var manifest: Dictionary = json.data
	if manifest.get("format") != "game-memory-bundle" or not manifest.get("platform") is String \
			or not manifest.get("executable") is String:
		return _failure("%s is not a game-memory bundle manifest; build the bundle again" % path)
	return {"ok": true, "manifest": manifest}


## Decides what the export of a preset with [param features] to [param export_path] does
## with the bundle in [param bundle_folder] (absolute). Returns
## [code]{"action": "copy", "source", "destination"}[/code] (Windows, Linux: beside the
## executable), [code]{"action": "macos_plugin", "source"}[/code] (into the app's
## [code]Contents/PlugIns/[/code]), [code]{"action": "skip", "reason"}[/code] (a target that
## cannot launch processes), or [code]{"action": "error", "message"}[/code] (no bundle, or one
## built for another platform: the game then falls back to the PATH).
static func plan_export(features: PackedStringArray, export_path: String,
		bundle_folder: String) -> Dictionary:
	for feature: String in NO_PROCESS_FEATURES:
		if features.has(feature):
			return {"action": "skip", "reason": "a %s export cannot launch the sidecar; set " \
					% feature + "GameMemory.server_url to a sidecar you run"}
	var read: Dictionary = read_manifest(bundle_folder)
	if not read["ok"]:
		return {"action": "error", "message": read["error"]["message"]}
	var platform: String = str(read["manifest"]["platform"])
	var parts: PackedStringArray = platform.split("-", false, 1)
	var os_feature: String = str(OS_FEATURES.get(parts[0], parts[0]))
	var arch: String = parts[1] if parts.size() > 1 else ""
	if not features.has(os_feature) or (not arch.is_empty() and not features.has(arch)):
		return {"action": "error", "message": "the bundle in %s is for %s, but this preset "
				% [bundle_folder, platform] + "exports for %s; build the bundle on a %s "
				% [_target(features), _target(features)] + "machine (game-memory bundle)"}
	if os_feature == "macos":
		return {"action": "macos_plugin", "source": bundle_folder}
	return {"action": "copy", "source": bundle_folder,
			"destination": export_path.get_base_dir().path_join(BUNDLE_FOLDER)}


## Copies the bundle [param source] to [param destination] (absolute folders). An older
## bundle at the destination is removed first; any other existing folder is left alone and
## the copy refused. Returns [code]{"ok": true, "files": int, "bytes": int, "links": int}[/code]
## or a failed result naming the file that could not be copied.
static func copy_bundle(source: String, destination: String) -> Dictionary:
	var read: Dictionary = read_manifest(source)
	if not read["ok"]:
		return read
	if DirAccess.dir_exists_absolute(destination):
		if not FileAccess.file_exists(destination.path_join(MANIFEST_NAME)):
			return _failure("%s exists and is not a game-memory bundle; it was left as it is "
					% destination + "and the bundle was not copied: move it away and export again")
		var removed: Error = remove_tree(destination)
		if removed != OK:
			return _failure("could not remove the older bundle %s (%s)"
					% [destination, error_string(removed)])
	var counts: Dictionary = {"ok": true, "files": 0, "bytes": 0, "links": 0}
	var error: String = _copy_tree(source, destination, counts)
	if not error.is_empty():
		return _failure(error)
	return counts


## Removes the folder [param path] and everything in it (links are removed, not followed).
static func remove_tree(path: String) -> Error:
	var directory: DirAccess = DirAccess.open(path)
	if directory == null:
		return DirAccess.get_open_error()
	directory.include_hidden = true
	for name: String in directory.get_files():
		var removed: Error = DirAccess.remove_absolute(path.path_join(name))
		if removed != OK:
			return removed
	for name: String in directory.get_directories():
		var child: String = path.path_join(name)
		var removed: Error = DirAccess.remove_absolute(child) if directory.is_link(child) \
				else remove_tree(child)
		if removed != OK:
			return removed
	return DirAccess.remove_absolute(path)


## Returns true for the addon files an exported game does not need: its editor-only folder.
static func is_editor_only(path: String) -> bool:
	return path.begins_with(EDITOR_FOLDER)
#endregion


#region Private methods
static func _copy_tree(source: String, destination: String, counts: Dictionary) -> String:
	var made: Error = DirAccess.make_dir_recursive_absolute(destination)
	if made != OK:
		return "could not create %s (%s)" % [destination, error_string(made)]
	var directory: DirAccess = DirAccess.open(source)
	if directory == null:
		return "could not open %s (%s)" % [source, error_string(DirAccess.get_open_error())]
	directory.include_hidden = true
	for name: String in directory.get_files():
		var error: String = _copy_entry(directory, source.path_join(name),
				destination.path_join(name), counts)
		if not error.is_empty():
			return error
	for name: String in directory.get_directories():
		var from: String = source.path_join(name)
		var error: String = _copy_entry(directory, from, destination.path_join(name), counts) \
				if directory.is_link(from) \
				else _copy_tree(from, destination.path_join(name), counts)
		if not error.is_empty():
			return error
	return ""


static func _copy_entry(directory: DirAccess, from: String, to: String,
		counts: Dictionary) -> String:
	if directory.is_link(from):
		# PyInstaller links shared libraries inside the bundle; keep them links.
		var target: String = directory.read_link(from)
		var linked: Error = directory.create_link(target, to)
		if linked != OK:
			return "could not link %s to %s (%s)" % [to, target, error_string(linked)]
		counts["links"] = int(counts["links"]) + 1
		return ""
	# Keep the permission bits: the sidecar and its libraries must stay executable. Where
	# the platform has none (Windows, the web), the copy gets the defaults.
	var permissions: int = FileAccess.get_unix_permissions(from)
	var copied: Error = directory.copy(from, to, permissions if permissions > 0 else -1)
	if copied != OK:
		return "could not copy %s to %s (%s)" % [from, to, error_string(copied)]
	var file: FileAccess = FileAccess.open(to, FileAccess.READ)
	counts["files"] = int(counts["files"]) + 1
	counts["bytes"] = int(counts["bytes"]) + (file.get_length() if file != null else 0)
	return ""


static func _target(features: PackedStringArray) -> String:
	var os_name: String = "another platform"
	for feature: String in OS_FEATURES.values():
		if features.has(feature):
			os_name = feature
	for arch: String in ["x86_64", "arm64", "x86_32", "arm32"]:
		if features.has(arch):
			return "%s-%s" % [os_name, arch]
	return os_name


static func _failure(message: String) -> Dictionary:
	return GameMemoryError.failure(GameMemoryError.SIDECAR_FAILED, message)
#endregion
