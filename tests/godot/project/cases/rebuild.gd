extends EngineTest
## Rebuilding the derived index reports progress, then completion, through signals.

const MEMORY_COUNT: int = 12


func run() -> void:
	var progress: Array = []
	var completed: Array = []
	var memory: GameMemory = make_memory()
	memory.rebuild_progressed.connect(
			func(done: int, total: int) -> void: progress.append([done, total]))
	memory.rebuild_completed.connect(
			func(status: Dictionary) -> void: completed.append(status))
	check("backend_ready", await wait_ready(memory))
	var stored: int = 0
	for index: int in MEMORY_COUNT:
		var result: Dictionary = await memory.remember("archivist_eve",
				"Entry %d of the village chronicle." % index, moment(index + 1))
		stored += 1 if result["ok"] else 0
	check("memories_stored", stored == MEMORY_COUNT, {"stored": stored})

	var rebuilt: Dictionary = await memory.rebuild(true)
	check("rebuild_succeeds", rebuilt["ok"], {"result": rebuilt})
	check("rebuild_progressed_at_least_start_and_end", progress.size() >= 2,
			{"progress": progress})
	if progress.size() >= 2:
		var first: Array = progress[0]
		var last: Array = progress[progress.size() - 1]
		check("rebuild_progress_starts_at_zero", first[0] == 0, {"first": first})
		check("rebuild_progress_ends_at_total", last[0] == last[1] and last[1] == MEMORY_COUNT,
				{"last": last})
		check("rebuild_progress_never_goes_back", _monotonic(progress), {"progress": progress})
	check("rebuild_completed_emitted_once_with_the_result", completed.size() == 1
			and completed[0] == rebuilt, {"completed": completed})
	check("rebuilt_index_is_ready", rebuilt.get("state") == "ready"
			and rebuilt.get("ready_entries") == MEMORY_COUNT
			and rebuilt.get("requires_rebuild") == false, {"result": rebuilt})
	var state: Dictionary = await memory.status()
	check("status_agrees_after_rebuild", state["ok"] and state.get("state") == "ready"
			and state.get("total_entries") == MEMORY_COUNT, {"status": state})
	var found: Dictionary = await memory.recall("archivist_eve", "village chronicle entry",
			moment(MEMORY_COUNT), {"limit": 3})
	check("recall_after_rebuild_uses_the_index", found["ok"] and found["memories"].size() == 3
			and found["fallback"] == false, {"result": found})


func _monotonic(progress: Array) -> bool:
	for index: int in range(1, progress.size()):
		if progress[index][0] < progress[index - 1][0]:
			return false
	return true
