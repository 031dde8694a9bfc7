"""`bertlite serve`: one model over HTTP (OpenAI /v1/embeddings, TEI /embed /embed_all /embed_sparse
/rerank /predict /tokenize /decode, Cohere /v1/rerank), its routes by its kind, with dynamic batching.

Needs the `serve` extra (starlette, uvicorn, prometheus_client); importing this package
alone imports none of them. app.py: the app and limits; endpoint.py: the wrapper every POST route
shares; service.py: the loaded job, its routes, input checks; routes/: one file per job; schemas*.py:
request bodies; batching.py: the queue and the model worker; metrics.py: Prometheus; server.py:
uvicorn; the command itself is bertlite.cli.serve.
"""
