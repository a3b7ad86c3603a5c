"""Modules that register pages, template helpers and producers (`docsgen.registry.load` imports each)."""
