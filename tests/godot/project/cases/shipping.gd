extends EngineTest
## Shipping: where the node finds its sidecar, and what the export plugin copies.
##
## The web runtime has no editor and cannot launch processes, so this case calls the plain
## functions that both use ([GameMemorySidecarLocator] and
## [code]addons/game_memory/editor/bundle_export.gd[/code]) on real files it writes under
## [code]user://[/code]: fake executables, PATH folders and bundle folders.

const BundleExport: GDScript = preload("res://addons/game_memory/editor/bundle_export.gd")
const LINUX_MANIFEST: String = '{"format": "game-memory-bundle", "format_version": 1, ' \
		+ '"platform": "linux-x86_64", "executable": "game-memory", "version": "0.1.0"}'

var _root: String = ""


func run() -> void:
	_root = ProjectSettings.globalize_path("user://shipping-%d" % Time.get_ticks_usec())
	DirAccess.make_dir_recursive_absolute(_root)
	_check_locator_order()
	_check_setting_paths()
	_check_other_platforms()
	_check_nothing_found()
	_check_export_plan()
	_check_copy()
	await _check_node_defaults_and_install_folder()
	check("scratch_folder_removed", BundleExport.remove_tree(_root) == OK
			and not DirAccess.dir_exists_absolute(_root))


func _touch(path: String, content: String = "x") -> void:
	DirAccess.make_dir_recursive_absolute(path.get_base_dir())
	var file: FileAccess = FileAccess.open(path, FileAccess.WRITE)
	file.store_string(content)
	file.close()


func _check_locator_order() -> void:
	var game: String = _root.path_join("game/mygame.x86_64")
	var beside: String = _root.path_join("game/game-memory/game-memory")
	var configured: String = _root.path_join("configured")
	var on_path: String = _root.path_join("bin2/game-memory")
	var path_variable: String = "%s:%s" % [_root.path_join("bin1"), _root.path_join("bin2")]
	for path: String in [game, beside, configured.path_join("game-memory"), on_path]:
		_touch(path)
	DirAccess.make_dir_recursive_absolute(_root.path_join("bin1"))
	var first: Dictionary = GameMemorySidecarLocator.locate(game, configured, path_variable,
			"Linux")
	check("the_bundle_beside_the_game_comes_first", first["ok"] and first["command"] == beside
			and first["where"] == "beside the game", {"result": first})
	DirAccess.remove_absolute(beside)
	var second: Dictionary = GameMemorySidecarLocator.locate(game, configured, path_variable,
			"Linux")
	check("then_the_project_setting_a_folder_means_the_sidecar_in_it", second["ok"]
			and second["command"] == configured.path_join("game-memory")
			and str(second["where"]).contains("game_memory/sidecar/path"), {"result": second})
	var third: Dictionary = GameMemorySidecarLocator.locate(game, "", path_variable, "Linux")
	check("then_game_memory_on_the_path", third["ok"] and third["command"] == on_path
			and third["where"] == "on the PATH", {"result": third})
	var places: Array[Dictionary] = GameMemorySidecarLocator.candidates("", configured, "Linux")
	check("without_an_executable_path_nothing_beside_the_game_is_tried", places.size() == 2
			and places[0]["where"] != "beside the game", {"places": places})


func _check_setting_paths() -> void:
	var game: String = _root.path_join("relgame/mygame.x86_64")
	var relative: String = _root.path_join("relgame/tools/game-memory")
	_touch(game)
	_touch(relative)
	var resolved: String = GameMemorySidecarLocator.resolve_setting_path("tools", game, "Linux")
	check("a_relative_setting_is_relative_to_the_executable", resolved == relative,
			{"resolved": resolved})
	_touch("user://shipping-user/bundle/game-memory")
	var user: String = GameMemorySidecarLocator.resolve_setting_path(
			"user://shipping-user/bundle", "", "Linux")
	check("a_user_setting_is_globalized", not user.begins_with("user://")
			and user.ends_with("shipping-user/bundle/game-memory")
			and FileAccess.file_exists(user), {"resolved": user})
	BundleExport.remove_tree(ProjectSettings.globalize_path("user://shipping-user"))
	var exact: String = GameMemorySidecarLocator.resolve_setting_path(relative, "", "Linux")
	check("an_executable_path_is_used_as_it_is", exact == relative, {"resolved": exact})


func _check_other_platforms() -> void:
	var game: String = _root.path_join("win/game.exe")
	var beside: String = _root.path_join("win/game-memory/game-memory.exe")
	var scripts: String = _root.path_join("win-scripts/game-memory.exe")
	_touch(game)
	_touch(scripts)
	check("windows_names_the_sidecar_with_exe",
			GameMemorySidecarLocator.executable_name("Windows") == "game-memory.exe"
			and GameMemorySidecarLocator.executable_name("Linux") == "game-memory")
	var on_path: Dictionary = GameMemorySidecarLocator.locate(game, "",
			"%s;%s" % [_root.path_join("nowhere"), scripts.get_base_dir()], "Windows")
	check("windows_splits_the_path_on_semicolons", on_path["ok"]
			and on_path["command"] == scripts, {"result": on_path})
	var without_extension: String = GameMemorySidecarLocator.resolve_setting_path(
			scripts.get_basename(), "", "Windows")
	check("windows_adds_exe_to_a_setting_without_it", without_extension == scripts,
			{"resolved": without_extension})
	_touch(beside)
	var found: Dictionary = GameMemorySidecarLocator.locate(game, "", "", "Windows")
	check("windows_finds_the_exe_beside_the_game", found["ok"] and found["command"] == beside,
			{"result": found})
	var mac: Array[Dictionary] = GameMemorySidecarLocator.candidates(
			"/Games/Village.app/Contents/MacOS/Village", "", "macOS")
	check("macos_also_looks_in_the_app_plugins_folder", mac.size() == 3
			and mac[1]["path"] == "/Games/Village.app/Contents/PlugIns/game-memory/game-memory",
			{"places": mac})


func _check_nothing_found() -> void:
	var game: String = _root.path_join("empty/game.x86_64")
	var missing: Dictionary = GameMemorySidecarLocator.locate(game, _root.path_join("no-such"),
			_root.path_join("no-bin"), "Linux")
	var message: String = message_of(missing)
	check("nothing_found_fails_with_sidecar_failed", not missing["ok"]
			and code_of(missing) == GameMemoryError.SIDECAR_FAILED, {"result": missing})
	check("the_error_names_every_place_tried",
			message.contains(_root.path_join("empty/game-memory/game-memory"))
			and message.contains(_root.path_join("no-such"))
			and message.contains("game-memory on the PATH")
			and message.contains("game-memory bundle"), {"message": message})


func _check_export_plan() -> void:
	var bundle: String = _root.path_join("src/game-memory")
	_touch(bundle.path_join("game-memory-bundle.json"), LINUX_MANIFEST)
	var export_path: String = _root.path_join("out/village.x86_64")
	var plan: Dictionary = BundleExport.plan_export(
			PackedStringArray(["linux", "x86_64", "pc"]), export_path, bundle)
	check("a_linux_export_copies_the_bundle_beside_the_executable", plan["action"] == "copy"
			and plan["source"] == bundle
			and plan["destination"] == _root.path_join("out/game-memory"), {"plan": plan})
	for features: PackedStringArray in [PackedStringArray(["web", "wasm32"]),
			PackedStringArray(["android", "arm64"]), PackedStringArray(["ios", "arm64"])]:
		var skipped: Dictionary = BundleExport.plan_export(features, export_path, bundle)
		check("a_%s_export_skips_the_bundle" % features[0], skipped["action"] == "skip"
				and str(skipped["reason"]).contains("server_url"), {"plan": skipped})
	var windows: Dictionary = BundleExport.plan_export(
			PackedStringArray(["windows", "x86_64", "pc"]), export_path, bundle)
	check("a_bundle_for_another_os_is_not_copied", windows["action"] == "error"
			and str(windows["message"]).contains("linux-x86_64")
			and str(windows["message"]).contains("windows-x86_64"), {"plan": windows})
	var arm: Dictionary = BundleExport.plan_export(
			PackedStringArray(["linux", "arm64", "pc"]), export_path, bundle)
	check("a_bundle_for_another_arch_is_not_copied", arm["action"] == "error", {"plan": arm})
	var none: Dictionary = BundleExport.plan_export(
			PackedStringArray(["linux", "x86_64"]), export_path, _root.path_join("nothing"))
	check("no_bundle_is_an_error_with_advice", none["action"] == "error"
			and str(none["message"]).contains("game-memory bundle --output"), {"plan": none})
	var mac_bundle: String = _root.path_join("mac/game-memory")
	_touch(mac_bundle.path_join("game-memory-bundle.json"),
			LINUX_MANIFEST.replace("linux-x86_64", "macos-arm64"))
	var mac: Dictionary = BundleExport.plan_export(PackedStringArray(["macos", "arm64", "pc"]),
			_root.path_join("out/Village.zip"), mac_bundle)
	check("a_macos_export_puts_the_bundle_in_the_app", mac["action"] == "macos_plugin"
			and mac["source"] == mac_bundle, {"plan": mac})
	check("a_relative_bundle_setting_is_relative_to_the_project",
			BundleExport.resolve_bundle_folder("build/../game-memory", "/work/village")
			== "/work/village/game-memory"
			and BundleExport.resolve_bundle_folder("/opt/gm/game-memory", "/work/village")
			== "/opt/gm/game-memory")
	check("the_editor_folder_is_left_out_of_exports",
			BundleExport.is_editor_only("res://addons/game_memory/editor/export_plugin.gd")
			and not BundleExport.is_editor_only("res://addons/game_memory/game_memory.gd")
			and not BundleExport.is_editor_only("res://addons/game_memory/plugin.gd"))


func _check_copy() -> void:
	var bundle: String = _root.path_join("src/game-memory")
	var files: PackedStringArray = PackedStringArray(["game-memory", ".gdignore",
			"_internal/libpython3.so", "_internal/numpy/core.so",
			"models/all-MiniLM-L6-v2/onnx/model_int8.onnx"])
	for index: int in files.size():
		_touch(bundle.path_join(files[index]), "file %d %s" % [index, "y".repeat(index * 100)])
	files.append("game-memory-bundle.json")
	var source_folder: DirAccess = DirAccess.open(bundle.path_join("_internal"))
	var linked: Error = source_folder.create_link("libpython3.so",
			bundle.path_join("_internal/libpython3.11.so"))
	var executable: String = bundle.path_join("game-memory")
	var made_executable: Error = FileAccess.set_unix_permissions(executable, 493) # rwxr-xr-x
	var destination: String = _root.path_join("out/game-memory")
	var copied: Dictionary = BundleExport.copy_bundle(bundle, destination)
	check("the_bundle_is_copied", copied["ok"] and copied["files"] == files.size(),
			{"result": copied})
	var identical: bool = true
	var size: int = 0
	for file: String in files:
		identical = identical and FileAccess.get_md5(destination.path_join(file)) \
				== FileAccess.get_md5(bundle.path_join(file))
		size += FileAccess.get_file_as_bytes(bundle.path_join(file)).size()
	check("every_file_arrives_identical_hidden_ones_too", identical and copied["bytes"] == size,
			{"bytes": copied.get("bytes"), "expected": size})
	var copied_folder: DirAccess = DirAccess.open(destination.path_join("_internal"))
	var link: String = destination.path_join("_internal/libpython3.11.so")
	check("a_symbolic_link_stays_a_link_to_the_same_target", linked == OK
			and copied["links"] == 1 and copied_folder.is_link(link)
			and copied_folder.read_link(link) == "libpython3.so",
			{"linked": error_string(linked), "result": copied})
	var source_mode: int = FileAccess.get_unix_permissions(executable)
	var copied_mode: int = FileAccess.get_unix_permissions(destination.path_join("game-memory"))
	note("permissions", {"set": error_string(made_executable), "source": source_mode,
			"copy": copied_mode})
	check("the_copy_keeps_the_permissions_the_platform_reports", copied_mode == source_mode,
			{"source": source_mode, "copy": copied_mode})
	_touch(destination.path_join("_internal/stale-from-an-older-bundle.so"))
	var again: Dictionary = BundleExport.copy_bundle(bundle, destination)
	check("copying_again_replaces_the_older_bundle_whole", again["ok"]
			and not FileAccess.file_exists(destination.path_join(
			"_internal/stale-from-an-older-bundle.so")), {"result": again})
	var foreign: String = _root.path_join("out2/game-memory")
	_touch(foreign.path_join("saves/slot1.dat"), "a player's data")
	var refused: Dictionary = BundleExport.copy_bundle(bundle, foreign)
	check("a_folder_that_is_not_a_bundle_is_never_replaced", not refused["ok"]
			and message_of(refused).contains("not a game-memory bundle")
			and FileAccess.get_file_as_string(foreign.path_join("saves/slot1.dat"))
			== "a player's data", {"result": refused})
	var not_a_bundle: Dictionary = BundleExport.copy_bundle(_root.path_join("out2"), destination)
	check("copying_something_that_is_not_a_bundle_is_refused", not not_a_bundle["ok"]
			and FileAccess.file_exists(destination.path_join("game-memory")),
			{"result": not_a_bundle})


func _check_node_defaults_and_install_folder() -> void:
	var fresh: GameMemory = GameMemory.new()
	check("by_default_the_node_looks_for_the_sidecar", fresh.sidecar_command.is_empty()
			and fresh.save_directory.begins_with("user://")
			and fresh.index_directory.begins_with("user://"))
	fresh.free()
	check("user_folders_hold_a_save",
			GameMemory.install_folder_problem("user://a/save", "/var/games/index").is_empty())
	var memory: GameMemory = make_memory({"server_url": "", "autostart": false,
			"save_directory": "res://saves"})
	var result: Dictionary = await memory.status()
	check("a_save_in_the_install_folder_is_refused", not result["ok"]
			and code_of(result) == GameMemoryError.SIDECAR_FAILED
			and message_of(result).contains("install folder")
			and message_of(result).contains("user://"), {"result": result})
	memory.queue_free()
