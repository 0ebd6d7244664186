"""The wire: one JSON-RPC message as the endpoint reads it, and SSE framing."""
