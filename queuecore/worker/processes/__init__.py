"""Handler processes (W7): the fork server and its client (`handler_processes`), the
worker's side of each kind of child (`handler_slot`, `loop_slot`) and the children
themselves (`handler_child`, `loop_child`)."""
