"""Handler processes (W7): the worker's side (`handler_processes`, and one slot per kind
of child: `handler_slot`, `loop_slot`), the fork server that starts the children
(`fork_server`), the children themselves (`handler_child`, `loop_child`), and what they
all share (`shared`)."""
