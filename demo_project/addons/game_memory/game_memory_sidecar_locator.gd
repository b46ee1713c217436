class_name GameMemorySidecarLocator
extends RefCounted
## Finds the game-memory sidecar to launch when [member GameMemory.sidecar_command] is empty.
##
## It looks, in order, for: the bundle that the export plugin copied beside the exported
## game ([code]<folder of the executable>/game-memory/game-memory[/code], [code].exe[/code] on
## Windows; on macOS also [code]Contents/PlugIns/game-memory/[/code] of the app), then the
## path in the project setting [code]game_memory/sidecar/path[/code] (a bundle folder or an
## executable, default [code]res://game-memory[/code], which is where
## [code]game-memory bundle --output <project folder>[/code] puts it, so running from the
## editor finds it too), then [code]game-memory[/code] on the PATH (a pip install). When
## nothing is found, the error lists every place that was tried. Only static functions over
## explicit inputs, so tests can call them on any platform, and [GameMemory]'s editor
## configuration warning can call them from the editor (static functions of a script work
## there without [code]@tool[/code]); nothing here launches anything.

#region Constants
## The project setting naming a bundle folder or a sidecar executable.
const PATH_SETTING: String = "game_memory/sidecar/path"
## The default of [constant PATH_SETTING]: the bundle inside the project folder.
const DEFAULT_PATH: String = "res://game-memory"
## The folder that holds a bundle, beside the game's executable.
const BUNDLE_FOLDER: String = "game-memory"
## The program's name, in a bundle and on the PATH.
const COMMAND_NAME: String = "game-memory"
#endregion


#region Public methods
## Returns the sidecar's file name on the OS named [param os_name] (as [method OS.get_name]
## spells it): [code]game-memory.exe[/code] on Windows, else [code]game-memory[/code].
static func executable_name(os_name: String) -> String:
	return COMMAND_NAME + ".exe" if os_name == "Windows" else COMMAND_NAME


## Returns the places to look, in order, as [code]{"where": String, "path": String}[/code]
## ([code]path[/code] empty for the PATH entry, which [method locate] searches). An empty
## [param executable_path] leaves out the places beside the game (the editor case);
## an empty [param setting_path] leaves out the setting.
static func candidates(executable_path: String, setting_path: String,
		os_name: String) -> Array[Dictionary]:
	var found: Array[Dictionary] = []
	var name: String = executable_name(os_name)
	if not executable_path.is_empty():
		var folder: String = executable_path.get_base_dir()
		found.append({"where": "beside the game",
				"path": folder.path_join(BUNDLE_FOLDER).path_join(name)})
		if os_name == "macOS":
			found.append({"where": "in the app's PlugIns folder",
					"path": folder.get_base_dir().path_join("PlugIns").path_join(BUNDLE_FOLDER)
					.path_join(name)})
	if not setting_path.is_empty():
		found.append({"where": "project setting %s" % PATH_SETTING,
				"path": resolve_setting_path(setting_path, executable_path, os_name)})
	found.append({"where": "on the PATH", "path": ""})
	return found


## Turns the value of [constant PATH_SETTING] into an absolute path of an executable:
## [code]res://[/code] and [code]user://[/code] paths are globalized, a relative path is
## relative to the executable's folder, and a folder means the sidecar inside it.
static func resolve_setting_path(value: String, executable_path: String,
		os_name: String) -> String:
	var path: String = value.strip_edges()
	if path.begins_with("res://") or path.begins_with("user://"):
		path = ProjectSettings.globalize_path(path)
	elif path.is_relative_path() and not executable_path.is_empty():
		path = executable_path.get_base_dir().path_join(path)
	if DirAccess.dir_exists_absolute(path):
		path = path.path_join(executable_name(os_name))
	elif os_name == "Windows" and path.get_extension().is_empty() \
			and FileAccess.file_exists(path + ".exe"):
		path += ".exe"
	return path


## Searches the folders of [param path_variable] (the PATH: [code]:[/code]-separated, or
## [code];[/code] on Windows) for the sidecar. Returns its path, or "" when it is not there.
static func find_on_path(path_variable: String, os_name: String) -> String:
	var separator: String = ";" if os_name == "Windows" else ":"
	for folder: String in path_variable.split(separator, false):
		var candidate: String = folder.strip_edges().path_join(executable_name(os_name))
		if FileAccess.file_exists(candidate):
			return candidate
	return ""


## Finds the sidecar: [code]{"ok": true, "command": String, "where": String}[/code] for the
## first place of [method candidates] that has it, else a failed result
## ([constant GameMemoryError.SIDECAR_FAILED]) whose message lists every place tried.
static func locate(executable_path: String, setting_path: String, path_variable: String,
		os_name: String) -> Dictionary:
	var tried: PackedStringArray = PackedStringArray()
	for candidate: Dictionary in candidates(executable_path, setting_path, os_name):
		var path: String = str(candidate["path"])
		if path.is_empty():
			path = find_on_path(path_variable, os_name)
			if path.is_empty():
				tried.append("%s on the PATH" % executable_name(os_name))
				continue
		elif not FileAccess.file_exists(path):
			tried.append("%s (%s)" % [path, candidate["where"]])
			continue
		return {"ok": true, "command": path, "where": candidate["where"]}
	return GameMemoryError.failure(GameMemoryError.SIDECAR_FAILED,
			"no game-memory sidecar was found; tried %s. Build one with `game-memory bundle "
			% ", ".join(tried) + "--output <your project folder>` (the export then copies it "
			+ "beside the game), or set GameMemory.sidecar_command or server_url")


## Finds the sidecar for this game: [method locate] with this process's executable, the
## project setting and the PATH. In the editor the executable is the editor's, so the
## places beside the game are left out.
static func locate_for_this_game() -> Dictionary:
	var executable: String = "" if Engine.is_editor_hint() else OS.get_executable_path()
	var setting: String = str(ProjectSettings.get_setting(PATH_SETTING, DEFAULT_PATH))
	return locate(executable, setting, OS.get_environment("PATH"), OS.get_name())
#endregion
