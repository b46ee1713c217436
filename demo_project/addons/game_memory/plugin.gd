@tool
extends EditorPlugin
## Editor entry point of the Game Memory addon.
##
## [GameMemory] is a global script class, so the node is in the "Create New Node" dialog
## without this plugin, and exported games never load it. In the editor it wires three things,
## each undone when it is disabled or the editor closes:
## [br]- the export plugin that copies the sidecar bundle beside desktop exports
## ([code]editor/export_plugin.gd[/code]), added in [method _enter_tree];
## [br]- the project settings [code]game_memory/sidecar/path[/code] and
## [code]game_memory/sidecar/bundle_folder[/code], shown in Project Settings (a setting left
## at its default is removed again on exit, so it never lands in [code]project.godot[/code]);
## [br]- the autoload [code]Memory[/code] (a [GameMemory] node), added when the plugin is
## enabled and removed when it is disabled. Remove it yourself if your game has its own node.

## The autoload the plugin adds when it is enabled.
const AUTOLOAD_NAME: String = "Memory"
## The script of that autoload: a [GameMemory] node with the default settings.
const AUTOLOAD_PATH: String = "res://addons/game_memory/game_memory.gd"
## The export plugin that ships the sidecar bundle.
const ExportPlugin: GDScript = preload("res://addons/game_memory/editor/export_plugin.gd")
## The export plugin's plain functions and setting names.
const BundleExport: GDScript = preload("res://addons/game_memory/editor/bundle_export.gd")

var _export_plugin: EditorExportPlugin = null


func _enter_tree() -> void:
	# Where the node looks when no bundle is beside the game (a bundle folder or an executable).
	_add_setting(GameMemorySidecarLocator.PATH_SETTING, GameMemorySidecarLocator.DEFAULT_PATH)
	# The bundle folder (game-memory bundle --output) copied beside desktop exports.
	_add_setting(BundleExport.BUNDLE_FOLDER_SETTING, BundleExport.DEFAULT_BUNDLE_FOLDER)
	_export_plugin = ExportPlugin.new()
	add_export_plugin(_export_plugin)


func _exit_tree() -> void:
	if _export_plugin != null:
		remove_export_plugin(_export_plugin)
		_export_plugin = null
	var defaults: Dictionary = {
		GameMemorySidecarLocator.PATH_SETTING: GameMemorySidecarLocator.DEFAULT_PATH,
		BundleExport.BUNDLE_FOLDER_SETTING: BundleExport.DEFAULT_BUNDLE_FOLDER,
	}
	for setting: String in defaults:
		if str(ProjectSettings.get_setting(setting, "")) == defaults[setting]:
			ProjectSettings.set_setting(setting, null) # untouched: leave no trace behind


func _enable_plugin() -> void:
	if not ProjectSettings.has_setting("autoload/" + AUTOLOAD_NAME):
		add_autoload_singleton(AUTOLOAD_NAME, AUTOLOAD_PATH)


func _disable_plugin() -> void:
	var autoload: String = str(ProjectSettings.get_setting("autoload/" + AUTOLOAD_NAME, ""))
	if autoload.trim_prefix("*") == AUTOLOAD_PATH:
		remove_autoload_singleton(AUTOLOAD_NAME)


func _add_setting(setting: String, default_value: String) -> void:
	if not ProjectSettings.has_setting(setting):
		ProjectSettings.set_setting(setting, default_value)
	# At its initial value a setting is not written to project.godot.
	ProjectSettings.set_initial_value(setting, default_value)
	ProjectSettings.add_property_info({"name": setting, "type": TYPE_STRING,
			"hint": PROPERTY_HINT_NONE, "hint_string": ""})
