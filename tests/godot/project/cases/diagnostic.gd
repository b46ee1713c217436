extends EngineTest
## A sidecar without its embedding model says so through diagnostic_emitted, and degrades to
## lexical recall; pytest starts it with --model default and no prepared model.


func run() -> void:
	var diagnostics: Array = []
	var completed: Array = []
	var memory: GameMemory = make_memory({"autostart": false})
	memory.diagnostic_emitted.connect(
			func(diagnostic: Dictionary) -> void: diagnostics.append(diagnostic))
	memory.rebuild_completed.connect(func(status: Dictionary) -> void: completed.append(status))
	memory.start()
	check("backend_ready", await wait_ready(memory))
	await wait_until(func() -> bool: return not diagnostics.is_empty(), 5.0)
	var first: Dictionary = diagnostics[0] if not diagnostics.is_empty() else {}
	check("diagnostic_emitted_for_the_missing_model",
			first.get("code") == "embedding_model_unavailable", {"diagnostics": diagnostics})
	check("diagnostic_is_a_warning_with_advice", first.get("severity") == "warning"
			and str(first.get("message", "")).contains("models prepare"), {"diagnostic": first})
	check("server_reports_lexical_mode", memory.get_server_info().get("mode") == "lexical",
			{"info": memory.get_server_info()})

	var stored: Dictionary = await memory.remember("npc", "The miller owes the baker money.",
			moment(3))
	var found: Dictionary = await memory.recall("npc", "miller money", moment(4))
	check("lexical_recall_still_answers", stored["ok"] and found["ok"]
			and found["memories"].size() == 1 and typeof(found["fallback"]) == TYPE_BOOL,
			{"result": found})
	var rebuilt: Dictionary = await memory.rebuild()
	check("rebuild_without_a_model_fails_with_embedding_unavailable", not rebuilt["ok"]
			and code_of(rebuilt) == GameMemoryError.EMBEDDING_UNAVAILABLE, {"result": rebuilt})
	check("rebuild_completed_carries_the_failure", completed.size() == 1
			and not completed[0]["ok"], {"completed": completed})
	var state: Dictionary = await memory.status()
	check("status_reports_lexical_state", state["ok"] and state.get("state") == "lexical"
			and state.get("total_entries") == 1, {"status": state})
