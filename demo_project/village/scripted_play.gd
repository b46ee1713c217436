class_name ScriptedPlay
extends Node
## Plays the scenario through the village scene by itself and prints what happened.
##
## Started by [VillageDemo] with the user argument [code]--scripted[/code]. It drives the
## scene as a player would (advance the clock, select a villager, type a question, drag the
## rewind slider) and prints one [code]GMDEMO {json}[/code] line per step, the same steps as
## [code]game-memory demo --json[/code], so a test can compare the two front ends:
## [br]- [code]{"step": "ready", "ok", "mode", "model"}[/code] once the backend is up;
## [br]- [code]{"step": "event", "id", "tick", "created", "ok"}[/code] per event;
## [br]- [code]{"step": "forget", "id", "tick", "npc", "memory_id", "forgotten", "ok"}[/code] and
## [code]{"step": "consolidate", "id", "tick", "npc", "memory_ids", "created", "ok"}[/code]
## per action of the game;
## [br]- [code]{"step": "question", "id", "stage", "npc", "tick", "memory_ids", "fallback",
## "correct", "future_ids", "expired_ids", "retracted_ids", "shown_beliefs", "ok"}[/code]
## per question
## ([code]shown_beliefs[/code]: the "belief ..." lines the recalled list shows);
## [br]- [code]{"step": "phase", "phase", "tick", "skipped"}[/code] before the rewind and the
## model change; [code]{"step": "model_change", "ok", "status"}[/code] and
## [code]{"step": "rebuild", "ok", "progress", "status"}[/code] during the model change;
## [br]- [code]{"step": "done", "ok", "questions", "correct", "problems"}[/code] at the end.
## [br][br]
## The model change needs the host to restart the sidecar with another model: with
## [code]--model-change-control=NAME[/code], it asks [code]<harness-url>/control/NAME[/code]
## (the engine test's harness) and reconnects; without it, that phase is reported as skipped.
## [code]--screenshot[/code] then prints the window as a PNG in
## [code]GMDEMO_SCREENSHOT {"index", "count", "data"}[/code] lines (base64 chunks).
## The game quits with 0 when every step ran, 1 when one failed, 3 when the watchdog fired.

#region Constants
## Seconds before a stuck run is ended (override with [code]--watchdog=SECONDS[/code]).
const DEFAULT_WATCHDOG_SECONDS: float = 240.0
## Base64 characters per screenshot line.
const SCREENSHOT_CHUNK: int = 60000
## The window size of a screenshot.
const SCREENSHOT_SIZE: Vector2i = Vector2i(1280, 720)
#endregion


#region Variables
var _village: VillageDemo = null
var _scenario: DemoScenario = null
var _problems: Array[String] = []
var _answers: int = 0
var _correct: int = 0
var _finished: bool = false
#endregion


#region Public methods
## Plays the whole scenario on [param village] and quits the game with the verdict.
func play(village: VillageDemo) -> void:
	_village = village
	_scenario = village.scenario
	var watchdog: float = float(village.arguments.get("watchdog", DEFAULT_WATCHDOG_SECONDS))
	get_tree().create_timer(watchdog, true, false, true).timeout.connect(_on_watchdog_timeout)
	if await _village.wait_for_backend():
		await _play_story()
	else:
		_problem("the memory backend was not ready: %s" % village.memory.get_last_error())
		_emit("ready", {"ok": false})
	_emit("done", {"ok": _problems.is_empty(), "questions": _answers, "correct": _correct,
			"problems": _problems})
	_finish(0 if _problems.is_empty() else 1)
#endregion


#region Private methods
func _play_story() -> void:
	var info: Dictionary = _village.memory.get_server_info()
	_emit("ready", {"ok": true, "mode": info.get("mode"), "model": info.get("model")})
	_village.event_remembered.connect(_on_event_remembered)
	_village.action_performed.connect(_on_action_performed)
	for question: Dictionary in _scenario.questions_of("play"):
		_check_events(await _village.advance_to(question["tick"]))
		await _ask(question, "play")
	_check_events(await _village.advance_to(_scenario.end_tick))
	var rewinds: Array[Dictionary] = _scenario.questions_of("rewind")
	if not rewinds.is_empty():
		var loaded: int = rewinds[0]["tick"]
		for question: Dictionary in rewinds:
			loaded = mini(loaded, question["tick"])
		_emit("phase", {"phase": "rewind", "tick": loaded, "skipped": false})
		_village.narrate("The player loads the save from %s." % DemoScenario.format_tick(loaded))
		for question: Dictionary in rewinds:
			await _ask(question, "rewind")
	await _change_model()
	if _village.arguments.has("screenshot"):
		await _screenshot()


func _ask(question: Dictionary, stage: String) -> void:
	_village.select_npc(question["npc"])
	_village.set_recall_tick(question["tick"])
	var result: Dictionary = await _village.ask(question["text"])
	var record: Dictionary = {"id": question["id"], "stage": stage, "npc": question["npc"],
			"tick": question["tick"], "ok": result["ok"]}
	if not result["ok"]:
		_problem("%s (%s): %s" % [question["id"], stage, result["error"]["message"]])
		_emit("question", record)
		return
	var memory_ids: Array[String] = []
	for item: Dictionary in result["memories"]:
		memory_ids.append(item["memory_id"])
	var verdict: Dictionary = _scenario.judge(question, result["memories"])
	record.merge({"memory_ids": memory_ids, "fallback": result["fallback"],
			"correct": verdict["correct"], "future_ids": verdict["future_ids"],
			"expired_ids": verdict["expired_ids"], "retracted_ids": verdict["retracted_ids"],
			"shown_beliefs": _shown_beliefs(_village.recalled_text())})
	_answers += 1
	if verdict["correct"]:
		_correct += 1
	_village.show_verdict(("The expected memory is in the top %d." % _scenario.top_k
			if verdict["correct"] else "Not the expected answer.")
			+ (" (Lexical fallback.)" if result["fallback"] else ""))
	_emit("question", record)


func _change_model() -> void:
	var questions: Array[Dictionary] = _scenario.questions_of("model_change")
	if questions.is_empty():
		return
	var tick: int = questions[0]["tick"]
	var control_name: String = str(_village.arguments.get("model-change-control", ""))
	var hybrid: bool = _village.memory.get_server_info().get("mode") == "hybrid"
	if control_name.is_empty() or not hybrid:
		_emit("phase", {"phase": "model_change", "tick": tick, "skipped": true})
		return
	_emit("phase", {"phase": "model_change", "tick": tick, "skipped": false})
	_village.narrate("A game update changes the embedding model: the memory sidecar restarts.")
	var asked: Dictionary = await _control(control_name)
	var reconnected: bool = false
	var status: Dictionary = {"ok": false}
	if asked["ok"]:
		reconnected = await _village.reconnect()
	if reconnected:
		status = await _village.memory.status()
	_emit("model_change", {"ok": reconnected and status["ok"],
			"model": _village.memory.get_server_info().get("model"), "status": status})
	if not reconnected:
		_problem("the sidecar did not come back with the changed model: %s" % asked["body"])
		return
	_village.narrate("The index status is %s: recall falls back to lexical until a rebuild."
			% str(status.get("state", "?")).to_upper())
	for question: Dictionary in questions:
		await _ask(question, "after_model_change")
	var progress: Array = []
	var record_progress: Callable = func(done: int, total: int) -> void:
		progress.append([done, total])
	_village.memory.rebuild_progressed.connect(record_progress)
	var rebuilt: Dictionary = await _village.rebuild_index()
	_village.memory.rebuild_progressed.disconnect(record_progress)
	_emit("rebuild", {"ok": rebuilt["ok"], "progress": progress, "status": rebuilt})
	if not rebuilt["ok"]:
		_problem("the rebuild failed: %s" % rebuilt["error"]["message"])
	else:
		_village.narrate("Rebuilt the vector index: %d memories re-embedded, status %s." % [
				int(rebuilt.get("ready_entries", 0)), str(rebuilt.get("state", "?")).to_upper()])
	for question: Dictionary in questions:
		await _ask(question, "after_rebuild")


func _check_events(results: Array[Dictionary]) -> void:
	for result: Dictionary in results:
		if not result["ok"]:
			_problem("remembering %s failed: %s" % [result.get("event", {}).get("id", "?"),
					result["error"]["message"]])


func _control(action: String) -> Dictionary:
	var http: HTTPRequest = HTTPRequest.new()
	http.timeout = 60.0
	add_child(http)
	var url: String = "%s/control/%s" % [str(_village.arguments.get("harness-url", "")), action]
	var error: Error = http.request(url)
	if error != OK:
		http.queue_free()
		return {"ok": false, "body": "request failed: %s" % error_string(error)}
	var response: Array = await http.request_completed
	http.queue_free()
	var body: PackedByteArray = response[3]
	return {"ok": response[0] == HTTPRequest.RESULT_SUCCESS and response[1] == 200,
			"body": body.get_string_from_utf8()}


func _screenshot() -> void:
	if OS.has_feature("web"):
		# The page's canvas sets the window size on the web; make it a normal window.
		JavaScriptBridge.eval("(function(){var c=document.getElementById('canvas');"
				+ "c.width=%d;c.height=%d;})()" % [SCREENSHOT_SIZE.x, SCREENSHOT_SIZE.y], true)
	else:
		get_window().size = SCREENSHOT_SIZE
	for _frame: int in 10:
		await get_tree().process_frame
	await RenderingServer.frame_post_draw
	var image: Image = get_viewport().get_texture().get_image()
	var encoded: String = Marshalls.raw_to_base64(image.save_png_to_buffer())
	var count: int = ceili(float(encoded.length()) / SCREENSHOT_CHUNK)
	for index: int in count:
		print("GMDEMO_SCREENSHOT %s" % JSON.stringify({"index": index, "count": count,
				"width": image.get_width(), "height": image.get_height(),
				"data": encoded.substr(index * SCREENSHOT_CHUNK, SCREENSHOT_CHUNK)}))


func _emit(step: String, record: Dictionary) -> void:
	var line: Dictionary = {"step": step}
	line.merge(record)
	print("GMDEMO %s" % JSON.stringify(line))


func _problem(message: String) -> void:
	_problems.append(message)
	push_warning(message)


func _finish(code: int) -> void:
	if _finished:
		return
	_finished = true
	get_tree().quit(code)
#endregion


#region Signal handlers
func _on_event_remembered(event: Dictionary, created: int) -> void:
	_emit("event", {"id": event["id"], "tick": event["tick"], "created": created, "ok": true})


func _on_action_performed(action: Dictionary, result: Dictionary) -> void:
	var record: Dictionary = {"id": action["id"], "tick": action["tick"], "npc": action["npc"],
			"ok": result["ok"]}
	if action["kind"] == "forget":
		record.merge({"memory_id": action["memory_ids"][0],
				"forgotten": result.get("forgotten", false)})
	else:
		record.merge({"memory_ids": action["memory_ids"], "created": result.get("created", false),
				"consolidates": result.get("memory", {}).get("consolidates", [])})
	if not result["ok"]:
		_problem("%s %s failed: %s" % [action["kind"], action["id"], result["error"]["message"]])
	_emit(action["kind"], record)


func _on_watchdog_timeout() -> void:
	if _finished:
		return
	_emit("done", {"ok": false, "reason": "watchdog fired", "questions": _answers,
			"correct": _correct, "problems": _problems})
	_finish(3)
#endregion


func _shown_beliefs(shown: String) -> Array[String]:
	var lines: Array[String] = []
	for line: String in shown.split("\n"):
		if line.strip_edges().begins_with("belief "):
			lines.append(line.strip_edges())
	return lines
