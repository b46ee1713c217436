extends Node
## Runs the engine test cases named on the command line, then quits with a verdict.
##
## The web runtime ignores [code]--script[/code], so this main scene reads the user arguments
## (after [code]--[/code]): [code]--case=a,b[/code] picks [code]res://cases/a.gd[/code] and
## [code]res://cases/b.gd[/code]; the others ([code]--ws-url[/code], [code]--token[/code],
## [code]--harness-url[/code], ...) are handed to every case. It prints one
## [code]GMTEST {json}[/code] line per check and [code]GMTEST_DONE {json}[/code] at the end,
## and quits with 0 when every check passed, 1 when one failed, 2 on bad arguments and 3 when
## the watchdog fired. Asserts are no-ops in the release runtime, so checks are explicit.

const DEFAULT_WATCHDOG_SECONDS: float = 40.0

var _arguments: Dictionary = {}
var _finished: bool = false


func _ready() -> void:
	_arguments = EngineTest.parse_user_args(OS.get_cmdline_user_args())
	var watchdog: float = float(_arguments.get("watchdog", DEFAULT_WATCHDOG_SECONDS))
	get_tree().create_timer(watchdog, true, false, true).timeout.connect(_on_watchdog_timeout)
	_run.call_deferred()


func _run() -> void:
	var names: PackedStringArray = str(_arguments.get("case", "")).split(",", false)
	if names.is_empty():
		EngineTest.emit_line("GMTEST_DONE", {"ok": false, "reason": "no --case=NAME argument"})
		_finish(2)
		return
	var checks: int = 0
	var failures: int = 0
	for case_name: String in names:
		var path: String = "res://cases/%s.gd" % case_name
		if not ResourceLoader.exists(path):
			EngineTest.emit_line("GMTEST", {"case": case_name, "check": "case_exists", "ok": false})
			checks += 1
			failures += 1
			continue
		var script: GDScript = load(path)
		var test_case: EngineTest = script.new()
		test_case.name = case_name
		test_case.configure(case_name, _arguments)
		add_child(test_case)
		EngineTest.emit_line("GMTEST_CASE", {"case": case_name, "event": "started"})
		await test_case.run()
		test_case.check("made_checks", test_case.check_count > 0)
		checks += test_case.check_count
		failures += test_case.failure_count
		EngineTest.emit_line("GMTEST_CASE", {"case": case_name, "event": "finished",
				"checks": test_case.check_count, "failures": test_case.failure_count})
		remove_child(test_case)
		test_case.queue_free()
	EngineTest.emit_line("GMTEST_DONE", {"ok": failures == 0, "checks": checks,
			"failures": failures})
	_finish(0 if failures == 0 else 1)


func _finish(code: int) -> void:
	if _finished:
		return
	_finished = true
	get_tree().quit(code)


func _on_watchdog_timeout() -> void:
	if _finished:
		return
	EngineTest.emit_line("GMTEST_DONE", {"ok": false, "reason": "watchdog fired"})
	_finish(3)
