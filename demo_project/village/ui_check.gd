class_name UiCheck
extends Node
## Drives the village scene through its controls, as a player would, and prints the checks.
##
## Started by [VillageDemo] with the user argument [code]--ui-check[/code] (the engine tests
## use it; the web runtime reports no script errors, so every expectation is an explicit
## check). It presses the buttons, picks a suggested question, drags the rewind slider and
## rebuilds, through the controls' own signals, and prints one
## [code]GMDEMO_UI {"check", "ok", ...}[/code] line per check, then
## [code]GMDEMO_UI {"check": "done", "ok", "failures"}[/code]. It quits with 0 when every check
## passed, 1 otherwise.

#region Constants
## Seconds any one step may take.
const STEP_SECONDS: float = 30.0
## How many times the advance button is pressed.
const ADVANCES: int = 6
#endregion


#region Variables
var _village: VillageDemo = null
var _failures: int = 0
#endregion


#region Public methods
## Runs the checks on [param village] and quits the game with the verdict.
func run(village: VillageDemo) -> void:
	_village = village
	var backend_up: bool = await village.wait_for_backend()
	_check("backend_ready", backend_up, {"error": village.memory.get_last_error()})
	if backend_up:
		await _advance_with_the_button()
		await _ask_through_the_question_box()
		await _rewind_with_the_slider()
		await _rebuild_with_the_button()
	print("GMDEMO_UI %s" % JSON.stringify({"check": "done", "ok": _failures == 0,
			"failures": _failures}))
	get_tree().quit(0 if _failures == 0 else 1)
#endregion


#region Private methods
func _advance_with_the_button() -> void:
	var button: Button = _village.get_node("%AdvanceButton")
	var remembered: Array[String] = []
	var record: Callable = func(event: Dictionary, _created: int) -> void:
		remembered.append(event["id"])
	_village.event_remembered.connect(record)
	for press: int in ADVANCES:
		button.pressed.emit()
		await _until(func() -> bool: return remembered.size() > press)
	_village.event_remembered.disconnect(record)
	var expected: Array[String] = []
	for index: int in ADVANCES:
		expected.append(_village.scenario.events[index]["id"])
	_check("advance_button_remembers_events_in_order", remembered == expected,
			{"remembered": remembered})
	var last: int = _village.scenario.events[ADVANCES - 1]["tick"]
	var clock: Label = _village.get_node("%ClockLabel")
	_check("clock_shows_the_last_event", _village.clock_tick == last
			and clock.text == DemoScenario.format_tick(last), {"clock": clock.text})
	var log_text: String = (_village.get_node("%VillageLog") as RichTextLabel).get_parsed_text()
	_check("log_names_the_witnesses", log_text.contains(_village.scenario.events[1]["text"])
			and log_text.contains("(Tess, Jory)"), {"log": log_text.left(300)})


func _ask_through_the_question_box() -> void:
	var jory: Button = _villager_button("Jory")
	_check("villager_button_exists", jory != null)
	if jory == null:
		return
	jory.pressed.emit()
	_check("villager_button_selects_the_npc", _village.selected_npc == "jory",
			{"selected": _village.selected_npc})
	var suggestions: ItemList = _village.get_node("%SuggestionList")
	var edit: LineEdit = _village.get_node("%QuestionEdit")
	_check("suggestions_are_jorys_questions", suggestions.item_count > 0)
	if suggestions.item_count == 0:
		return
	suggestions.item_selected.emit(suggestions.item_count - 1)
	_check("a_suggestion_fills_the_question_box",
			edit.text == suggestions.get_item_text(suggestions.item_count - 1), {"text": edit.text})
	var answers: Array[Dictionary] = []
	var record: Callable = func(_npc: String, _text: String, _tick: int,
			result: Dictionary) -> void: answers.append(result)
	_village.question_answered.connect(record)
	(_village.get_node("%AskButton") as Button).pressed.emit()
	await _until(func() -> bool: return not answers.is_empty())
	var shown: String = (_village.get_node("%RecalledList") as RichTextLabel).get_parsed_text()
	var first_text: String = ""
	if not answers.is_empty() and answers[0]["ok"] and not answers[0]["memories"].is_empty():
		first_text = answers[0]["memories"][0]["text"]
	_check("ask_button_recalls_and_lists_the_memories", not first_text.is_empty()
			and shown.begins_with("1. " + first_text), {"shown": shown.left(300)})
	_check("the_list_says_why_a_memory_ranked", shown.contains("vector #")
			or shown.contains("lexical #"), {"shown": shown.left(300)})
	answers.clear()
	edit.text_submitted.emit("   ")
	await get_tree().process_frame
	_check("an_empty_question_is_not_sent", answers.is_empty())
	_village.question_answered.disconnect(record)


func _rewind_with_the_slider() -> void:
	var slider: HSlider = _village.get_node("%RewindSlider")
	var moment: Label = _village.get_node("%MomentLabel")
	slider.value = 0.0
	_check("slider_moves_the_moment_back", _village.recall_tick == 0
			and moment.text.ends_with("(an earlier save)"), {"moment": moment.text})
	var result: Dictionary = await _village.ask("Who took our money?")
	var shown: String = (_village.get_node("%RecalledList") as RichTextLabel).get_parsed_text()
	_check("nothing_is_recalled_before_anything_happened", result["ok"]
			and result["memories"].is_empty() and shown.contains("remembers nothing"),
			{"shown": shown.left(200)})
	slider.value = slider.max_value
	_check("slider_returns_to_the_clock", _village.recall_tick == _village.clock_tick
			and not moment.text.contains("earlier"), {"moment": moment.text})


func _rebuild_with_the_button() -> void:
	var done: Array[Dictionary] = []
	var record: Callable = func(status: Dictionary) -> void: done.append(status)
	_village.memory.rebuild_completed.connect(record)
	(_village.get_node("%RebuildButton") as Button).pressed.emit()
	await _until(func() -> bool: return not done.is_empty())
	_village.memory.rebuild_completed.disconnect(record)
	var bar: ProgressBar = _village.get_node("%RebuildProgress")
	_check("rebuild_button_rebuilds_the_index", not done.is_empty() and done[0]["ok"]
			and done[0].get("state") == "ready", {"status": done[0] if not done.is_empty() else {}})
	_check("progress_bar_reaches_the_end", bar.value == bar.max_value,
			{"value": bar.value, "max": bar.max_value})


func _villager_button(name_prefix: String) -> Button:
	for child: Node in _village.get_node("%VillagerList").get_children():
		if child is Button and (child as Button).text.begins_with(name_prefix):
			return child
	return null


func _until(condition: Callable) -> bool:
	var deadline: int = Time.get_ticks_msec() + int(STEP_SECONDS * 1000.0)
	while not condition.call():
		if Time.get_ticks_msec() >= deadline:
			return false
		await get_tree().process_frame
	return true


func _check(check_name: String, ok: bool, details: Dictionary = {}) -> void:
	if not ok:
		_failures += 1
	var record: Dictionary = {"check": check_name, "ok": ok}
	record.merge(details)
	print("GMDEMO_UI %s" % JSON.stringify(record))
#endregion
