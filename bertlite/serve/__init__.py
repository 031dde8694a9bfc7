"""`bertlite serve`: an embedding server (OpenAI /v1/embeddings, TEI /embed) with dynamic batching.

Needs the `serve` extra (starlette, uvicorn, prometheus_client); importing this package
alone imports none of them. app.py: routes and limits; schemas.py: request bodies;
batching.py: the queue and the model worker; metrics.py: Prometheus; server.py: uvicorn;
the command itself is bertlite.cli.serve.
"""
