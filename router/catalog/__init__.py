"""What the router serves itself beside the worker's tools: resources read from the record and a
library of prompts (MCP ``resources/*`` and ``prompts/*``). Never needs a worker."""
