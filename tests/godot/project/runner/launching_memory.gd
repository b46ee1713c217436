class_name LaunchingMemory
extends GameMemory
## A [GameMemory] that launches a [FakeSidecar] instead of a process: the node's own launch,
## failure and shutdown code runs, against a pretend process and a real sidecar's socket.

## The launcher the next [method GameMemory.start] uses.
var fake: FakeSidecar = null


## Returns a node set up to launch [param launcher], with save folders under
## [code]user://[/code] for [param session].
static func around(launcher: FakeSidecar, session: String) -> LaunchingMemory:
	var memory: LaunchingMemory = LaunchingMemory.new()
	memory.fake = launcher
	memory.sidecar_command = "pretend-game-memory"
	memory.save_directory = "user://launching/%s/save" % session
	memory.index_directory = "user://launching/%s/index" % session
	memory.session_id = session
	memory.request_timeout = 10.0
	memory.startup_timeout = 10.0
	return memory


func _new_sidecar() -> GameMemorySidecar:
	return fake
