"""The folder a launcher puts on ``PYTHONPATH`` (``cpu_standins.STANDIN_PATH``).

It holds nothing but the ``sgl_kernel`` shim, so no other module of this project is
importable under a top-level name there: the stand-ins' ``kernels`` module once was,
and it shadowed the PyPI package ``kernels`` that transformers 5.25 imports.
"""
