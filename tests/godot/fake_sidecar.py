"""A small in-memory stand-in for ``game-memory serve --websocket`` (protocol version 1).

Development aid only: it let the engine harness and the addon be written before the real
sidecar existed. The engine tests run against the real sidecar; nothing imports this.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import sys
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

KINDS = {"event", "fact", "relationship", "goal", "reflection", "procedure"}
MEMORIES: list[dict[str, Any]] = []


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _moment(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("timeline_id"), str) \
            or not isinstance(value.get("tick"), int):
        raise RpcError(-32602, f"{name}: a moment needs timeline_id (str) and tick (int)")
    return {"timeline_id": value["timeline_id"], "tick": value["tick"]}


def remember(p: dict[str, Any]) -> dict[str, Any]:
    kind = p.get("kind", "event")
    if kind not in KINDS:
        raise RpcError(-32602, f"kind: {kind!r} is not one of {sorted(KINDS)}")
    moment = _moment(p.get("moment"), "moment")
    payload = p.get("payload", {"text": p["text"]})
    digest = hashlib.sha256(json.dumps([p["session_id"], p["owner_id"], moment, kind,
                                        p.get("scope", "personal"), p["text"], payload],
                                       sort_keys=True).encode()).hexdigest()[:32]
    memory_id = p.get("memory_id") or "gm-" + digest
    for item in MEMORIES:
        if item["memory_id"] == memory_id:
            return {"memory_id": memory_id, "created": False, "memory": item}
    item = {"memory_id": memory_id, "session_id": p["session_id"], "owner_id": p["owner_id"],
            "text": p["text"], "kind": kind, "scope": p.get("scope", "personal"),
            "moment": moment, "importance": p.get("importance", 0.5), "tags": p.get("tags", []),
            "payload": payload, "expires_at": None, "metadata": {}}
    MEMORIES.append(item)
    return {"memory_id": memory_id, "created": True, "memory": item}


def recall(p: dict[str, Any]) -> dict[str, Any]:
    limit = p.get("limit", 8)
    if not isinstance(limit, int) or not 0 <= limit <= 100:
        raise RpcError(-32602, f"limit: {limit!r} must be an int from 0 to 100")
    at = _moment(p["at_or_before"], "at_or_before") if "at_or_before" in p else None
    words = set(str(p.get("text", "")).lower().split())
    found = []
    for item in MEMORIES:
        if item["session_id"] != p["session_id"]:
            continue
        if "owner_id" in p and item["owner_id"] != p["owner_id"]:
            continue
        if at and (item["moment"]["timeline_id"] != at["timeline_id"]
                   or item["moment"]["tick"] > at["tick"]):
            continue
        if p.get("kinds") and item["kind"] not in p["kinds"]:
            continue
        found.append((len(words & set(item["text"].lower().split())), item))
    found.sort(key=lambda pair: -pair[0])
    memories = [dict(item, why={"lexical_rank": rank + 1, "vector_rank": None,
                                "vector_score": None, "fused_score": 1.0 / (rank + 1),
                                "age_ticks": at["tick"] - item["moment"]["tick"] if at else None})
                for rank, (_, item) in enumerate(found[:limit])]
    stage = {"stage": "lexical_search", "duration_ms": 0.1, "scanned_count": len(MEMORIES),
             "candidate_count": len(found), "reused": False}
    return {"memories": memories, "stages": [stage], "fallback": False}


def status(p: dict[str, Any]) -> dict[str, Any]:
    count = sum(1 for item in MEMORIES if item["session_id"] == p["session_id"])
    return {"mode": "hybrid", "state": "ready" if count else "empty", "active_identity": "fake",
            "total_entries": count, "ready_entries": count, "pending_entries": 0,
            "stale_entries": 0, "orphan_entries": 0, "requires_rebuild": False}


async def handle(ws: ServerConnection, token: str) -> None:
    initialized = False
    async for frame in ws:
        msg = json.loads(frame)
        method, p, rid = msg.get("method"), msg.get("params", {}), msg.get("id")
        try:
            if not initialized and method != "initialize":
                raise RpcError(-32001, "initialize first")
            if method == "initialize":
                if p.get("token") != token:
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "error": {
                        "code": -32001, "message": "wrong token"}}))
                    await ws.close(4001, "unauthorized")
                    return
                initialized = True
                result: Any = {"protocol_version": 1, "server": "fake 0.1.0", "mode": "hybrid",
                               "model": "fake"}
            elif method == "memory.remember":
                result = remember(p)
            elif method == "memory.recall":
                result = recall(p)
            elif method == "memory.recall_many":
                results = []
                for query in p["queries"]:
                    try:
                        results.append({"ok": True, **recall(query)})
                    except RpcError as exc:
                        results.append({"ok": False, "error": {"code": exc.code,
                                                               "message": str(exc)}})
                result = {"results": results}
            elif method == "memory.status":
                result = status(p)
            elif method == "memory.rebuild":
                total = status(p)["total_entries"]
                for done in range(total + 1):
                    await ws.send(json.dumps({"jsonrpc": "2.0", "method":
                                              "memory.rebuild_progress", "params": {
                                                  "session_id": p["session_id"], "done": done,
                                                  "total": total}}))
                result = status(p)
            elif method == "memory.migrate":
                result = {"migrated_entries": 0, "partitioned_entries": 0, "vector_entries": 0}
            else:
                raise RpcError(-32601, f"no method {method}")
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "result": result}
        except RpcError as exc:
            reply = {"jsonrpc": "2.0", "id": rid, "error": {"code": exc.code,
                                                            "message": str(exc)}}
        await ws.send(json.dumps(reply))


async def main() -> None:
    token = secrets.token_urlsafe(16)
    async with serve(lambda ws: handle(ws, token), "127.0.0.1", 0,
                     max_size=1 << 20) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(json.dumps({"event": "ready", "url": f"ws://127.0.0.1:{port}", "token": token,
                          "protocol_version": 1}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main())
