class_name VillageDemo
extends Control
## The village of Millbrook: its villagers, a game clock, a question box, and what the
## selected villager recalls, through one [GameMemory] node, exactly as a game would use it.
##
## The clock advances from event to event; each event is remembered by the villagers who
## witnessed it ([method GameMemory.remember], one memory per witness). Asking the selected
## villager a question recalls their memories as of the moment on the rewind slider
## ([method GameMemory.recall] with [code]at_or_before[/code]): dragging it back is loading an
## earlier save, and nothing after that moment is recalled. As the clock passes them, the game
## makes a villager forget a memory ([method GameMemory.forget]) or sums memories up
## ([method GameMemory.consolidate]): both on game time, so an earlier save still remembers.
## [br][br]
## User arguments (after [code]--[/code] on the command line):
## [code]--ws-url=URL --token=T[/code] connect to a running sidecar instead of launching one;
## [code]--model=NAME[/code] and [code]--sidecar-command=PATH[/code] configure the launched one;
## [code]--scripted[/code] plays the scenario by itself and quits (see [ScriptedPlay]);
## [code]--ui-check[/code] drives the controls and prints checks (see [UiCheck]).

#region Signals
## Emitted when the clock reached an event and its witnesses remembered it.
signal event_remembered(event: Dictionary, created: int)
## Emitted when the clock passed an action of the game (a forget, a consolidation), with
## its result.
signal action_performed(action: Dictionary, result: Dictionary)
## Emitted when the selected villager answered a question, with the recall result.
signal question_answered(npc_id: String, text: String, tick: int, result: Dictionary)
#endregion


#region Constants
## Where a launched sidecar keeps the demo's save.
const SAVE_DIRECTORY: String = "user://millbrook/save"
## Where a launched sidecar keeps the demo's derived index.
const INDEX_DIRECTORY: String = "user://millbrook/index"
## Seconds to wait for the sidecar to be ready.
const BACKEND_TIMEOUT_SECONDS: float = 60.0
#endregion


#region Variables
## The scenario being played (null until it is loaded).
var scenario: DemoScenario = null
## The game clock: the latest moment the story has reached, in ticks (in-game minutes).
var clock_tick: int = 0
## The moment questions are asked at; the rewind slider moves it back (an earlier save).
var recall_tick: int = 0
## The villager questions go to.
var selected_npc: String = ""
## The user arguments, [code]--key=value[/code] as [code]{"key": "value"}[/code].
var arguments: Dictionary = {}

var _next_event: int = 0
var _next_action: int = 0
var _busy: bool = false
var _npc_buttons: Dictionary = {}
var _rebuilding: bool = false

## The memory node every villager remembers and recalls through.
@onready var memory: GameMemory = $GameMemory
@onready var _title_label: Label = %TitleLabel
@onready var _clock_label: Label = %ClockLabel
@onready var _advance_button: Button = %AdvanceButton
@onready var _backend_label: Label = %BackendLabel
@onready var _rewind_slider: HSlider = %RewindSlider
@onready var _moment_label: Label = %MomentLabel
@onready var _villager_list: VBoxContainer = %VillagerList
@onready var _village_log: RichTextLabel = %VillageLog
@onready var _asking_label: Label = %AskingLabel
@onready var _question_edit: LineEdit = %QuestionEdit
@onready var _ask_button: Button = %AskButton
@onready var _suggestion_list: ItemList = %SuggestionList
@onready var _recalled_list: RichTextLabel = %RecalledList
@onready var _verdict_label: Label = %VerdictLabel
@onready var _rebuild_button: Button = %RebuildButton
@onready var _rebuild_progress: ProgressBar = %RebuildProgress
#endregion


#region Static methods
## Parses [code]--key=value[/code] (and bare [code]--flag[/code], as "true") user arguments.
static func parse_arguments(raw: PackedStringArray) -> Dictionary:
	var parsed: Dictionary = {}
	for argument: String in raw:
		var text: String = argument.trim_prefix("--")
		var equals: int = text.find("=")
		if equals < 0:
			parsed[text] = "true"
		else:
			parsed[text.left(equals)] = text.substr(equals + 1)
	return parsed
#endregion


#region Engine callbacks
func _ready() -> void:
	arguments = parse_arguments(OS.get_cmdline_user_args())
	_connect_controls()
	var loaded: Dictionary = DemoScenario.load_file()
	if not loaded["ok"]:
		_log("[color=#ff8080]%s[/color]" % loaded["message"])
		push_error(loaded["message"])
		if arguments.has("scripted"):
			print("GMDEMO %s" % JSON.stringify({"step": "done", "ok": false,
					"reason": loaded["message"]}))
			get_tree().quit(2)
		return
	scenario = loaded["scenario"]
	_title_label.text = scenario.title
	_build_villagers()
	_configure_memory()
	_update_clock()
	memory.start()
	if arguments.has("scripted"):
		var player: ScriptedPlay = ScriptedPlay.new()
		player.name = "ScriptedPlay"
		add_child(player)
		player.play.call_deferred(self)
	elif arguments.has("ui-check"):
		var checker: UiCheck = UiCheck.new()
		checker.name = "UiCheck"
		add_child(checker)
		checker.run.call_deferred(self)
#endregion


#region Public methods
## Waits until the memory backend is ready; returns false when it failed or timed out.
func wait_for_backend(seconds: float = BACKEND_TIMEOUT_SECONDS) -> bool:
	var deadline: int = Time.get_ticks_msec() + int(seconds * 1000.0)
	while memory.get_state() != GameMemory.State.READY \
			and memory.get_state() != GameMemory.State.FAILED:
		if Time.get_ticks_msec() >= deadline:
			return false
		await get_tree().process_frame
	return memory.is_backend_ready()


## Reconnects to the backend (after the sidecar was restarted, e.g. with another model);
## returns true when it is ready again.
func reconnect() -> bool:
	memory.stop()
	memory.start()
	return await wait_for_backend()


## Advances the clock to the next event and has its witnesses remember it. Returns
## [code]{"ok", "event", "created"}[/code]; [code]ok[/code] is false when every event has
## happened or a remember failed (the error is in [code]error[/code]).
func advance_clock() -> Dictionary:
	if _next_event >= scenario.events.size():
		return {"ok": false, "error": {"code": 0, "message": "the story is over"}}
	var item: Dictionary = scenario.events[_next_event]
	await _perform_actions(item["tick"] - 1) # what the game did before this moment
	_next_event += 1
	# Every witness remembers at once: one round trip per event, not one per witness.
	var results: Array[Dictionary] = []
	for witness: String in item["witnesses"]:
		_remember_into(results, witness, item)
	while results.size() < item["witnesses"].size():
		await get_tree().process_frame
	var created: int = 0
	var failure: Dictionary = {}
	for result: Dictionary in results:
		if not result["ok"]:
			failure = result
		elif result["created"]:
			created += 1
	_set_clock(item["tick"])
	_log_event(item)
	event_remembered.emit(item, created)
	if not failure.is_empty():
		return {"ok": false, "event": item, "created": created, "error": failure["error"]}
	return {"ok": true, "event": item, "created": created}


## Advances the clock to [param tick], remembering every event up to it; returns the
## [method advance_clock] results, in order.
func advance_to(tick: int) -> Array[Dictionary]:
	var results: Array[Dictionary] = []
	while _next_event < scenario.events.size() and scenario.events[_next_event]["tick"] <= tick:
		results.append(await advance_clock())
	await _perform_actions(tick)
	_set_clock(maxi(clock_tick, tick))
	return results


## Selects the villager questions go to.
func select_npc(npc_id: String) -> void:
	selected_npc = npc_id
	for other: String in _npc_buttons:
		var button: Button = _npc_buttons[other]
		button.set_pressed_no_signal(other == npc_id)
	var villager: Dictionary = scenario.npc(npc_id)
	_asking_label.text = "Ask %s, %s:" % [villager.get("name", npc_id), villager.get("role", "")]
	_fill_suggestions()


## Sets the moment questions are asked at (at most the clock): an earlier one is an earlier save.
func set_recall_tick(tick: int) -> void:
	recall_tick = clampi(tick, 0, clock_tick)
	_rewind_slider.set_value_no_signal(recall_tick)
	_update_clock()


## Asks the selected villager [param text] as of [member recall_tick] and shows what they
## recall. Resolves with the [method GameMemory.recall] result.
func ask(text: String) -> Dictionary:
	_question_edit.text = text
	var tick: int = recall_tick
	var result: Dictionary = await memory.recall(selected_npc, text, scenario.moment(tick),
			{"limit": scenario.recall_limit})
	_show_recall(result, tick)
	question_answered.emit(selected_npc, text, tick, result)
	return result


## Returns the recalled memories as shown on screen (the list's text without markup).
func recalled_text() -> String:
	return _recalled_list.get_parsed_text()


## Shows a verdict line under the recalled memories.
func show_verdict(text: String) -> void:
	_verdict_label.text = text


## Adds a line of narration (what the player or the game did) to the village log.
func narrate(text: String) -> void:
	_log("[i][color=#c8d8ff]%s[/color][/i]" % text)


## Rebuilds the derived index from the save, showing its progress. Resolves with the status.
func rebuild_index() -> Dictionary:
	_rebuilding = true
	_rebuild_button.disabled = true
	_rebuild_progress.value = 0.0
	var status: Dictionary = await memory.rebuild()
	_rebuilding = false
	_rebuild_button.disabled = false
	_update_backend_label()
	return status
#endregion


#region Private methods
func _perform_actions(tick: int) -> void:
	while _next_action < scenario.actions.size() and scenario.actions[_next_action]["tick"] <= tick:
		var action: Dictionary = scenario.actions[_next_action]
		_next_action += 1
		var name: String = str(scenario.npc(action["npc"]).get("name", action["npc"]))
		var result: Dictionary
		if action["kind"] == "forget":
			result = await memory.forget(action["npc"], action["memory_ids"][0],
					scenario.moment(action["tick"]))
			narrate("%s  The game makes %s forget %s: an earlier save still remembers it." % [
					DemoScenario.format_tick(action["tick"]), name, action["memory_ids"][0]])
		else:
			result = await memory.consolidate(action["npc"], action["memory_ids"],
					action["text"], scenario.moment(action["tick"]),
					scenario.summary_options(action))
			narrate("%s  What %s makes of it: “%s”" % [
					DemoScenario.format_tick(action["tick"]), name, action["text"]])
		if not result["ok"]:
			_log("[color=#ff8080]%s[/color]" % result["error"]["message"])
		action_performed.emit(action, result)


func _remember_into(results: Array[Dictionary], witness: String, item: Dictionary) -> void:
	results.append(await memory.remember(witness, item["text"], scenario.moment(item["tick"]),
			scenario.remember_options(item)))


func _log(line: String) -> void:
	_village_log.append_text(line + "\n")


func _connect_controls() -> void:
	_advance_button.pressed.connect(_on_advance_button_pressed)
	_ask_button.pressed.connect(_on_ask_button_pressed)
	_question_edit.text_submitted.connect(_on_question_submitted)
	_rewind_slider.value_changed.connect(_on_rewind_slider_changed)
	_suggestion_list.item_selected.connect(_on_suggestion_selected)
	_rebuild_button.pressed.connect(_on_rebuild_button_pressed)
	memory.backend_ready.connect(_update_backend_label)
	memory.backend_failed.connect(_on_backend_failed)
	memory.diagnostic_emitted.connect(_on_diagnostic_emitted)
	memory.rebuild_progressed.connect(_on_rebuild_progressed)


func _configure_memory() -> void:
	memory.session_id = scenario.session_id
	memory.autostart = false
	if arguments.has("ws-url"):
		memory.server_url = str(arguments["ws-url"])
		memory.token = str(arguments.get("token", ""))
	else:
		memory.model = str(arguments.get("model", "default"))
		memory.sidecar_command = str(arguments.get("sidecar-command", "game-memory"))
		memory.save_directory = SAVE_DIRECTORY
		memory.index_directory = INDEX_DIRECTORY
	memory.request_timeout = 30.0
	memory.startup_timeout = BACKEND_TIMEOUT_SECONDS


func _build_villagers() -> void:
	var group: ButtonGroup = ButtonGroup.new()
	for villager: Dictionary in scenario.npcs:
		var button: Button = Button.new()
		button.toggle_mode = true
		button.button_group = group
		button.text = "%s\n%s" % [villager["name"], villager["role"]]
		button.autowrap_mode = TextServer.AUTOWRAP_WORD_SMART
		button.custom_minimum_size = Vector2(180, 0)
		button.alignment = HORIZONTAL_ALIGNMENT_LEFT
		var npc_id: String = villager["id"]
		button.pressed.connect(func() -> void: select_npc(npc_id))
		_villager_list.add_child(button)
		_npc_buttons[npc_id] = button
	if not scenario.npcs.is_empty():
		select_npc(scenario.npcs[0]["id"])


func _fill_suggestions() -> void:
	_suggestion_list.clear()
	var seen: Dictionary = {}
	for question: Dictionary in scenario.questions:
		if question["npc"] == selected_npc and not seen.has(question["text"]):
			seen[question["text"]] = true
			_suggestion_list.add_item(question["text"])


func _set_clock(tick: int) -> void:
	clock_tick = tick
	_rewind_slider.max_value = maxi(tick, 1)
	set_recall_tick(tick)


func _update_clock() -> void:
	_clock_label.text = DemoScenario.format_tick(clock_tick)
	var rewound: String = "" if recall_tick == clock_tick else "  (an earlier save)"
	_moment_label.text = DemoScenario.format_tick(recall_tick) + rewound
	_advance_button.disabled = _next_event >= scenario.events.size()


func _update_backend_label() -> void:
	var info: Dictionary = memory.get_server_info()
	if info.is_empty():
		_backend_label.text = "memory: starting..."
		return
	var model_name: String = str(info.get("model", ""))
	if info.get("mode") == "hybrid":
		var short: String = model_name.get_slice("@", 0).get_slice("/", 2)
		_backend_label.text = "memory: hybrid recall (%s)" % short
	else:
		_backend_label.text = "memory: lexical recall only"


func _log_event(item: Dictionary) -> void:
	var names: PackedStringArray = PackedStringArray()
	for witness: String in item["witnesses"]:
		names.append(str(scenario.npc(witness).get("name", witness)))
	_log("[b]%s[/b]  %s  [color=#a0a8b8](%s)[/color]" % [
			DemoScenario.format_tick(item["tick"]), item["text"], ", ".join(names)])


func _show_recall(result: Dictionary, tick: int) -> void:
	_recalled_list.clear()
	_verdict_label.text = ""
	if not result["ok"]:
		_recalled_list.append_text("[color=#ff8080]The memory failed: %s[/color]"
				% result["error"]["message"])
		return
	if result["memories"].is_empty():
		_recalled_list.append_text("[i]%s remembers nothing about that as of %s.[/i]" % [
				scenario.npc(selected_npc).get("name", selected_npc),
				DemoScenario.format_tick(tick)])
	for index: int in result["memories"].size():
		var item: Dictionary = result["memories"][index]
		var at: int = item["moment"]["tick"]
		_recalled_list.append_text("[b]%d.[/b] %s\n[color=#a0a8b8]     %s, %s  ·  %s  ·  "
				% [index + 1, item["text"], DemoScenario.format_tick(at),
				DemoScenario.describe_age(tick - at), _why(item)]
				+ "importance %.1f[/color]\n" % float(item.get("importance", 0.0)))
		if item.get("belief_key") != null:
			_recalled_list.append_text("[color=#80c0ff]     belief %s, as of %s[/color]\n"
					% [item["belief_key"], DemoScenario.format_tick(at)])
	if result["fallback"]:
		_verdict_label.text = "semantic recall unavailable: lexical recall answered alone"


func _why(item: Dictionary) -> String:
	var why: Dictionary = item.get("why", {})
	var parts: PackedStringArray = PackedStringArray()
	if why.get("lexical_rank") != null:
		parts.append("lexical #%d" % int(why["lexical_rank"]))
	if why.get("vector_rank") != null:
		parts.append("vector #%d (cos %.2f)" % [int(why["vector_rank"]),
				float(why.get("vector_score", 0.0))])
	return " + ".join(parts)
#endregion


#region Signal handlers
func _on_advance_button_pressed() -> void:
	if _busy:
		return
	_busy = true
	var result: Dictionary = await advance_clock()
	if not result["ok"] and result.has("event"):
		_log("[color=#ff8080]%s[/color]" % result["error"]["message"])
	_busy = false


func _on_ask_button_pressed() -> void:
	_on_question_submitted(_question_edit.text)


func _on_question_submitted(text: String) -> void:
	if _busy or text.strip_edges().is_empty():
		return
	_busy = true
	await ask(text.strip_edges())
	_busy = false


func _on_rewind_slider_changed(value: float) -> void:
	set_recall_tick(int(value))


func _on_suggestion_selected(index: int) -> void:
	_question_edit.text = _suggestion_list.get_item_text(index)


func _on_rebuild_button_pressed() -> void:
	if not _rebuilding:
		await rebuild_index()


func _on_rebuild_progressed(done: int, total: int) -> void:
	# Nothing to re-embed (total 0) is a finished rebuild: show a full bar.
	_rebuild_progress.max_value = maxi(total, 1)
	_rebuild_progress.value = done if total > 0 else 1


func _on_backend_failed(error: Dictionary) -> void:
	_backend_label.text = "memory: offline"
	_log("[color=#ff8080]memory backend failed: %s[/color]" % error.get("message", ""))


func _on_diagnostic_emitted(diagnostic: Dictionary) -> void:
	_log("[color=#ffd080]%s[/color]" % diagnostic.get("message", ""))
#endregion
