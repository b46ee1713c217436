"""The Godot contract: JSON-RPC 2.0 over stdio and loopback WebSocket."""
