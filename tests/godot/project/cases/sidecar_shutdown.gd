extends EngineTest
## A launched sidecar gets a bounded chance to finish when its node goes, and is never left.
##
## The node launches a [FakeSidecar] (a pretend process; its ready line names the real
## sidecar). Freeing the node, or removing it from the tree, must ask the process to exit by
## closing its stdin and let it exit by itself, not kill it at once; one that does not exit is
## killed after [constant GameMemorySidecar.EXIT_GRACE_MSEC] even though its node polls
## nothing any more. What the game's quit runs, [method GameMemorySidecarReaper.finish_all],
## waits at most [constant GameMemorySidecarReaper.QUIT_WAIT_MSEC], then kills.

const EXIT_AFTER_MSEC: int = 400


func run() -> void:
	await _check_a_freed_node_lets_its_sidecar_finish()
	await _check_a_removed_node_still_has_its_sidecar_killed_in_time()
	await _check_the_quit_wait_is_bounded()


func _check_a_freed_node_lets_its_sidecar_finish() -> void:
	var launcher: FakeSidecar = _launcher(EXIT_AFTER_MSEC)
	var memory: LaunchingMemory = await _ready_memory(launcher, "freed")
	# A write fired without awaiting, then the node goes in the same frame.
	var outcome: Dictionary = {}
	_remember_into(memory, outcome)
	memory.queue_free()
	await wait_until(func() -> bool: return launcher.ended_msec >= 0, 5.0)
	check("freeing_the_node_closes_the_sidecars_stdin", launcher.stdin_closed_msec >= 0,
			{"stdin_closed_msec": launcher.stdin_closed_msec})
	check("freeing_the_node_does_not_kill_the_sidecar_at_once", launcher.exited_by_itself(),
			{"kills": launcher.kill_count, "ended_msec": launcher.ended_msec,
			"stdin_closed_msec": launcher.stdin_closed_msec})
	check("the_sidecar_had_its_time_to_finish", launcher.ended_msec - launcher.stdin_closed_msec
			>= EXIT_AFTER_MSEC - 20, {"msec": launcher.ended_msec - launcher.stdin_closed_msec})
	check("the_unawaited_call_resolved_stopped",
			outcome.has("result") and code_of(outcome["result"]) == GameMemoryError.STOPPED,
			{"outcome": outcome})
	var reader: GameMemory = make_memory()
	var found: Dictionary = await reader.recall("witness", "lantern", {}, {"limit": 5})
	check("the_unawaited_write_reached_the_sidecar", found["ok"]
			and found["memories"].size() == 1, {"result": found})
	reader.queue_free()


func _check_a_removed_node_still_has_its_sidecar_killed_in_time() -> void:
	var launcher: FakeSidecar = _launcher(-1)
	var memory: LaunchingMemory = await _ready_memory(launcher, "removed")
	remove_child(memory)
	var seconds: float = GameMemorySidecar.EXIT_GRACE_MSEC / 1000.0 + 2.0
	var ended: bool = await wait_until(func() -> bool: return launcher.ended_msec >= 0, seconds)
	check("a_node_out_of_the_tree_still_has_its_stuck_sidecar_killed",
			ended and launcher.kill_count == 1, {"kills": launcher.kill_count})
	var waited: int = launcher.ended_msec - launcher.stdin_closed_msec
	check("it_is_killed_after_the_grace_period", ended
			and waited >= GameMemorySidecar.EXIT_GRACE_MSEC - 20
			and waited < GameMemorySidecar.EXIT_GRACE_MSEC + 1000, {"msec": waited})
	check("nothing_is_left_to_watch", GameMemorySidecarReaper.get_watched_count() == 0,
			{"watched": GameMemorySidecarReaper.get_watched_count()})
	memory.free()


func _check_the_quit_wait_is_bounded() -> void:
	var quick: FakeSidecar = _launcher(EXIT_AFTER_MSEC)
	var quick_memory: LaunchingMemory = await _ready_memory(quick, "quit_quick")
	quick_memory.stop()
	var started: int = Time.get_ticks_msec()
	GameMemorySidecarReaper.finish_all()
	var waited: int = Time.get_ticks_msec() - started
	check("at_quit_a_sidecar_that_exits_is_waited_for", quick.exited_by_itself()
			and waited >= EXIT_AFTER_MSEC - 20
			and waited < GameMemorySidecarReaper.QUIT_WAIT_MSEC, {"msec": waited})

	var stuck: FakeSidecar = _launcher(-1)
	var stuck_memory: LaunchingMemory = await _ready_memory(stuck, "quit_stuck")
	stuck_memory.stop()
	started = Time.get_ticks_msec()
	GameMemorySidecarReaper.finish_all()
	waited = Time.get_ticks_msec() - started
	check("at_quit_a_stuck_sidecar_is_killed_after_the_quit_wait", stuck.kill_count == 1
			and waited >= GameMemorySidecarReaper.QUIT_WAIT_MSEC - 20
			and waited < GameMemorySidecarReaper.QUIT_WAIT_MSEC + 500, {"msec": waited})
	quick_memory.queue_free()
	stuck_memory.queue_free()


func _launcher(exit_after_msec: int) -> FakeSidecar:
	var launcher: FakeSidecar = FakeSidecar.new(str(arguments.get("ws-url", "")),
			str(arguments.get("token", "")))
	launcher.exit_after_stdin_closed_msec = exit_after_msec
	return launcher


func _ready_memory(launcher: FakeSidecar, label: String) -> LaunchingMemory:
	var memory: LaunchingMemory = LaunchingMemory.around(launcher, case_name)
	add_child(memory)
	check("%s_sidecar_gets_ready" % label, await wait_ready(memory),
			{"error": memory.get_last_error()})
	return memory


func _remember_into(memory: GameMemory, into: Dictionary) -> void:
	into["result"] = await memory.remember("witness", "A lantern burned in the tower.",
			moment(3))
