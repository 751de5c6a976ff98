"""``zoo serve``: zoo's models behind an HTTP API (:mod:`zoo.serve.app`), their work in
one engine thread that batches across requests (:mod:`zoo.serve.engine`)."""
