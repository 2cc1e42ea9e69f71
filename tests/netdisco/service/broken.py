"""A spider module that fails to import: the engine answers 400 and starts nothing."""

raise RuntimeError("this module is broken on purpose")
