@tool
extends EditorPlugin
## Editor entry point of the Game Memory addon.
##
## It registers nothing: [GameMemory] is a global script class, so the node shows up in the
## "Create New Node" dialog as soon as the addon folder is in the project. Enabling the plugin
## therefore has no side effects, and disabling it leaves nothing behind. Runtime code never
## depends on this script, so exported games work without it.


func _enter_tree() -> void:
	pass


func _exit_tree() -> void:
	pass
