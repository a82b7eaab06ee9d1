"""Small MCP servers the tests start as subprocesses (real stdio, real protocol)."""
