"""CAST inside real SGLang (0.5.23): the ``CAST`` and ``GOODPUT`` speculative
algorithms, registered through SGLang's ``sglang.srt.plugins`` entry point.

Modules that import SGLang: ``register`` (the entry point), ``spec`` (how SGLang
sees the algorithms, and the start-up checks), ``worker`` (the EAGLE v2 worker
driven by our policies), ``profile_forwards`` (SGLang's own verify and draft
forwards timed for ``cast-autotune profile --backend sglang``; GPU only).  ``contract`` lists everything of SGLang the plugin uses
and checks the installed version against it (it imports SGLang only when run).
Pure modules, importable without SGLang: ``drafting`` and ``verify_layout`` (the
tree in SGLang's static layout), ``decider`` and ``runtime_shapes`` (the worker's
policy side and its runtime-state catalogue), ``state_cover`` and ``tune_states``
(which states to build, from trace replay), ``rank_sync`` (every tensor-parallel
rank reloads at the same iteration), ``memory_plan`` (will a launch fit;
``cast-autotune preflight``), ``plugin_config``, ``reload`` and ``launch``
(``--backend sglang``).  The runbook is ``docs/gpu.md``.
"""
