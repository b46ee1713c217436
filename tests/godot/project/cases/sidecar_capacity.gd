extends EngineTest
## The node's [member GameMemory.maximum_entries] reaches the sidecar it launches as
## [code]--maximum-entries N[/code] (none at 0, the sidecar's default), and the sidecar keeps it.
##
## The node launches a [FakeSidecar] that records its arguments: a pretend process whose ready
## line names the real sidecar, which pytest started with [code]--maximum-entries 2[/code]
## (the arguments the node asked for), so a third memory is refused with
## [constant GameMemoryError.CAPACITY_EXCEEDED] and a message that names the node's setting.

const BOUND: int = 2


## A [FakeSidecar] that keeps the arguments it was launched with.
class RecordingSidecar:
	extends FakeSidecar

	## The arguments of the last launch.
	var launched_with: PackedStringArray = PackedStringArray()

	func _init(url: String, token: String) -> void:
		super(url, token)

	func _start_process(command: String, launch_arguments: PackedStringArray) -> String:
		launched_with = launch_arguments
		return super(command, launch_arguments)


func run() -> void:
	var launcher: RecordingSidecar = _launcher()
	var memory: LaunchingMemory = LaunchingMemory.around(launcher, case_name)
	memory.maximum_entries = BOUND
	add_child(memory)
	check("the_bounded_sidecar_gets_ready", await wait_ready(memory),
			{"error": memory.get_last_error()})
	check("it_is_launched_with_the_bound",
			_value_of(launcher.launched_with, "--maximum-entries") == str(BOUND),
			{"arguments": launcher.launched_with})
	for tick: int in range(1, BOUND + 1):
		var kept: Dictionary = await memory.remember("mira", "the well, day %d" % tick,
				moment(tick))
		check("remembered_%d" % tick, kept["ok"], {"result": kept})
	var refused: Dictionary = await memory.remember("mira", "one memory too many",
			moment(BOUND + 1))
	check("a_memory_past_the_bound_is_capacity_exceeded",
			code_of(refused) == GameMemoryError.CAPACITY_EXCEEDED, {"result": refused})
	check("the_message_names_the_node_setting",
			message_of(refused).contains("maximum_entries setting of the Godot GameMemory node"),
			{"result": refused})
	memory.queue_free()

	var plain_launcher: RecordingSidecar = _launcher()
	var plain: LaunchingMemory = LaunchingMemory.around(plain_launcher, case_name + "_plain")
	add_child(plain)
	check("the_default_sidecar_gets_ready", await wait_ready(plain),
			{"error": plain.get_last_error()})
	check("at_0_it_is_launched_without_a_bound",
			plain.maximum_entries == 0
			and not plain_launcher.launched_with.has("--maximum-entries")
			and plain_launcher.launched_with.has("--save-dir"),
			{"arguments": plain_launcher.launched_with})
	check("capacity_arguments_name_the_bound",
			GameMemorySidecar.capacity_arguments(50)
			== PackedStringArray(["--maximum-entries", "50"])
			and GameMemorySidecar.capacity_arguments(0).is_empty())
	plain.queue_free()
	await wait_seconds(0.3)


func _launcher() -> RecordingSidecar:
	return RecordingSidecar.new(str(arguments.get("ws-url", "")), str(arguments.get("token", "")))


func _value_of(launch_arguments: PackedStringArray, option: String) -> String:
	var at: int = launch_arguments.find(option)
	if at < 0 or at + 1 >= launch_arguments.size():
		return ""
	return launch_arguments[at + 1]
