extends EngineTest
## A connection asks Godot for an inbound buffer of exactly the largest answer, and an answer
## close to that size still arrives whole.
##
## Godot reserves the next power of two above the inbound buffer size (32 MiB for 16 MiB) plus
## a read buffer of that size for every connection, from the moment it connects: on the web,
## from the page's 2 GiB heap. pytest stored ANSWER_MEMORIES memories of TEXT_LENGTH
## characters for OWNER through its own client, so one recall of all of them is about
## 16,000,000 bytes, near the sidecar's cap of 16,777,216.

## The NPC whose memories pytest stored.
const OWNER: String = "chronicler"
## How many memories pytest stored, and the length of each one's text.
const ANSWER_MEMORIES: int = 16
const TEXT_LENGTH: int = 1000000


func run() -> void:
	var memory: GameMemory = make_memory({"request_timeout": 60.0})
	check("backend_ready", await wait_ready(memory))
	var asked: int = memory._connection._socket.inbound_buffer_size
	check("the_socket_holds_exactly_the_largest_answer",
			asked == GameMemoryConnection.MAX_RESPONSE_BYTES, {"inbound_buffer_size": asked})
	var found: Dictionary = await memory.recall(OWNER, "", moment(100),
			{"limit": ANSWER_MEMORIES})
	var memories: Array = found.get("memories", [])
	var lengths: Array = memories.map(func(item: Dictionary) -> int: return item["text"].length())
	check("an_answer_near_the_cap_arrives_whole", found["ok"]
			and memories.size() == ANSWER_MEMORIES
			and lengths.all(func(length: int) -> bool: return length == TEXT_LENGTH),
			{"code": code_of(found), "message": message_of(found), "lengths": lengths})
