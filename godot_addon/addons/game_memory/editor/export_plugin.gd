@tool
extends EditorExportPlugin
## Ships the game-memory sidecar bundle with desktop exports.
##
## When a Windows or Linux preset is exported, it copies the bundle folder named by the
## project setting [code]game_memory/sidecar/bundle_folder[/code] (default
## [code]res://game-memory[/code], which [code]game-memory bundle --output <project>[/code]
## writes) to [code]game-memory/[/code] beside the exported executable, where [GameMemory]
## looks first. A macOS export gets it in the app's [code]Contents/PlugIns/[/code] (so it is
## signed with the app). Web, Android and iOS exports are left alone. The addon's
## [code]editor/[/code] folder is left out of every exported game. All decisions and the copy
## itself are in [code]bundle_export.gd[/code]; this script only connects them to the editor.

## The plain functions that decide and copy (tested in the engine without an editor).
const BundleExport: GDScript = preload("res://addons/game_memory/editor/bundle_export.gd")


func _get_name() -> String:
	return "GameMemorySidecarBundle"


func _export_begin(features: PackedStringArray, _is_debug: bool, path: String,
		_flags: int) -> void:
	var setting: String = str(ProjectSettings.get_setting(BundleExport.BUNDLE_FOLDER_SETTING,
			BundleExport.DEFAULT_BUNDLE_FOLDER))
	var folder: String = BundleExport.resolve_bundle_folder(setting,
			ProjectSettings.globalize_path("res://"))
	var plan: Dictionary = BundleExport.plan_export(features, path, folder)
	match str(plan["action"]):
		"copy":
			var copied: Dictionary = BundleExport.copy_bundle(str(plan["source"]),
					str(plan["destination"]))
			if copied["ok"]:
				print("Game Memory: copied the sidecar bundle to %s (%d files, %.1f MB)"
						% [plan["destination"], copied["files"], copied["bytes"] / 1e6])
			else:
				push_error("Game Memory: %s" % copied["error"]["message"])
		"macos_plugin":
			add_macos_plugin_file(str(plan["source"]))
		"error":
			push_warning("Game Memory: the sidecar bundle was not exported: %s" % plan["message"])


func _export_file(path: String, _type: String, _features: PackedStringArray) -> void:
	if BundleExport.is_editor_only(path):
		skip()
