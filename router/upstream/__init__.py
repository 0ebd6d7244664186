"""The router's side of its workers: its own HTTP/1.1 client, kept-alive sockets, and one
worker's connection (the client's traffic and the router's own sessions go through it)."""
