"""The NPC village scenario shared by the terminal demo and the Godot demo's checks."""
