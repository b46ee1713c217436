class_name FakeSidecar
extends GameMemorySidecar
## A sidecar launcher with a pretend process, for the lifecycle the web runtime cannot launch.
##
## Only the process operations of [GameMemorySidecar] are replaced; its state machine, its
## ready-line parsing and [GameMemorySidecarReaper] run as they are. The pretend process
## prints a ready line naming a real sidecar the harness started, so the node connects to a
## real server; the case decides when the pretend process dies, and when it exits after its
## stdin is closed, and reads back whether it was asked to exit and whether it was killed.

## The pretend process prints its ready line when polled; false: it stays silent.
var prints_ready_line: bool = true
## The pretend process exits this long after its stdin is closed; -1: never by itself.
var exit_after_stdin_closed_msec: int = 100
## How many times the pretend process was killed.
var kill_count: int = 0
## When its stdin was closed ([method Time.get_ticks_msec]), or -1.
var stdin_closed_msec: int = -1
## When the pretend process ended (exited or killed), or -1 while it runs.
var ended_msec: int = -1

var _ready_line: String = ""
var _ready_line_read: bool = false


func _init(url: String, token: String) -> void:
	var ready: Dictionary = {
		"event": "ready",
		"url": url,
		"token": token,
		"protocol_version": PROTOCOL_VERSION,
	}
	_ready_line = JSON.stringify(ready) + "\n"


## Ends the pretend process at once, as a crash would.
func die() -> void:
	if ended_msec < 0:
		ended_msec = Time.get_ticks_msec()


## Returns true when the pretend process ended by itself, after its stdin was closed.
func exited_by_itself() -> bool:
	return ended_msec >= 0 and kill_count == 0 and stdin_closed_msec >= 0


func _start_process(_command: String, _arguments: PackedStringArray) -> String:
	_pid = 4242
	return ""


func _read_stdout() -> PackedByteArray:
	if not prints_ready_line or _ready_line_read:
		return PackedByteArray()
	_ready_line_read = true
	return _ready_line.to_utf8_buffer()


func _is_running() -> bool:
	if ended_msec < 0 and stdin_closed_msec >= 0 and exit_after_stdin_closed_msec >= 0 \
			and Time.get_ticks_msec() >= stdin_closed_msec + exit_after_stdin_closed_msec:
		ended_msec = Time.get_ticks_msec()
	return ended_msec < 0


func _exit_code() -> int:
	return 0 if kill_count == 0 else 9


func _kill_process() -> void:
	kill_count += 1
	die()


func _close_stdin() -> void:
	if stdin_closed_msec < 0:
		stdin_closed_msec = Time.get_ticks_msec()
