"""HTTP server around the native engine: OpenAI-compatible and SGLang-native
endpoints, Prometheus metrics and CAST profile hot-reload.

Start it with ``python -m sglang_cast.launch_server``; embed it with
``sglang_cast.server.app.create_app(engine, ServerConfig(...))``.  This package
file imports nothing, so the command line can answer ``--help`` and argument
errors without loading torch.
"""
