"""`mcp-router stdio`: an MCP server on stdin/stdout that forwards every message to the router.

``upstream`` speaks Streamable HTTP to the router (one session); ``relay`` moves messages between
the SDK's stdio transport and it.
"""
