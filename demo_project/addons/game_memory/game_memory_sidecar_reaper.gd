class_name GameMemorySidecarReaper
extends RefCounted
## Watches stopped sidecars every frame until they are gone, and bounds their wait at quit.
##
## [method GameMemorySidecar.stop] hands its sidecar here: the node that owned it may have
## left the tree or been freed, and then polls nothing. Each frame of the [SceneTree], every
## sidecar watched is polled (which kills one still running after
## [constant GameMemorySidecar.EXIT_GRACE_MSEC]) until it has exited. When the game quits, no
## frame comes again: the root leaving the tree (after every other node, whose
## [code]_exit_tree[/code] stopped its sidecar) makes the last frame wait up to
## [constant QUIT_WAIT_MSEC] for the sidecars to finish their requests and exit, then kill
## the rest.

#region Constants
## How long the game's last frame waits, when the game quits, for stopped sidecars to exit
## before they are killed, in milliseconds (one with nothing left to do exits in about 0.1 s).
const QUIT_WAIT_MSEC: int = 2000
#endregion


#region Static variables
# Stopped sidecars not yet gone.
static var _exiting: Array[GameMemorySidecar] = []
#endregion


#region Public methods
## Polls [param sidecar] every frame from now on until it has exited (see the class doc).
static func watch(sidecar: GameMemorySidecar) -> void:
	if not _exiting.has(sidecar):
		_exiting.append(sidecar)
	var tree: SceneTree = Engine.get_main_loop() as SceneTree
	if tree == null:
		return # no frames to watch in: its owner's polls, or the game's exit, end it
	if not tree.process_frame.is_connected(_poll_all):
		tree.process_frame.connect(_poll_all)
	if not tree.root.tree_exiting.is_connected(finish_all):
		# The root leaves the tree only when the game quits, after every other node.
		tree.root.tree_exiting.connect(finish_all)


## Waits, blocking, up to [constant QUIT_WAIT_MSEC] for every watched sidecar to finish its
## requests and exit, then kills those left. It runs when the game quits (no frame comes
## again then); a game that ends its process another way can call it first.
static func finish_all() -> void:
	var deadline: int = Time.get_ticks_msec() + QUIT_WAIT_MSEC
	while not _exiting.is_empty() and Time.get_ticks_msec() < deadline:
		for sidecar: GameMemorySidecar in _exiting.duplicate():
			sidecar.poll()
		_forget_gone()
		if not _exiting.is_empty():
			OS.delay_msec(10)
	for sidecar: GameMemorySidecar in _exiting:
		sidecar.kill()
	_exiting.clear()


## Returns how many stopped sidecars have not exited yet.
static func get_watched_count() -> int:
	return _exiting.size()
#endregion


#region Private methods
static func _poll_all() -> void:
	for sidecar: GameMemorySidecar in _exiting.duplicate():
		sidecar.poll()
	_forget_gone()
	var tree: SceneTree = Engine.get_main_loop() as SceneTree
	if _exiting.is_empty() and tree != null and tree.process_frame.is_connected(_poll_all):
		tree.process_frame.disconnect(_poll_all)


static func _forget_gone() -> void:
	var left: Array[GameMemorySidecar] = []
	for sidecar: GameMemorySidecar in _exiting:
		if sidecar.get_state() != GameMemorySidecar.State.EXITED:
			left.append(sidecar)
	_exiting = left
#endregion
