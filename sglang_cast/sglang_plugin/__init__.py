"""CAST inside real SGLang (0.5.23): the ``CAST`` and ``GOODPUT`` speculative
algorithms, registered through SGLang's ``sglang.srt.plugins`` entry point.

Modules that import SGLang: ``register`` (the entry point), ``spec`` (how SGLang
sees the algorithms, and the start-up checks), ``worker`` (the EAGLE v2 worker
driven by our policies), ``profile_forwards`` (SGLang's own verify and draft
forwards timed for ``cast-autotune profile --backend sglang``, on a GPU or on
SGLang's CPU engine).  ``contract`` lists everything of SGLang the plugin uses
and checks the installed version against it (it imports SGLang only when run).

SGLang on a CPU, and whole iterations timed:

* ``cpu_runtime`` -- what SGLang's CPU engine needs on a machine without AMX (its
  environment, the stand-ins on ``PYTHONPATH``, ``intel_amx`` kept);
* ``cpu_serve`` -- ``python -m sglang_cast.sglang_plugin.cpu_serve``: SGLang's own
  server on the CPU, with every SGLang flag;
* ``cpu_standins`` -- pure-torch stand-ins for the ``sgl_kernel`` ops SGLang's CPU
  path imports (test infrastructure, never a performance number);
* ``profile_steps`` -- the CAST worker's whole iterations timed for the
  host-overhead table, one SGLang engine per tree of the step design;
* ``step_log`` -- the worker's log of each decode iteration (its interval, what it
  drafted and verified), on only while ``profile_steps`` runs it.

Pure modules, importable without SGLang: ``drafting`` and ``verify_layout`` (the
tree in SGLang's static layout), ``lookup_branch`` (the prompt-lookup branch's
contexts), ``decider`` and ``runtime_shapes`` (the worker's
policy side and its runtime-state catalogue), ``state_cover`` and ``tune_states``
(which states to build, from trace replay), ``rank_sync`` (every tensor-parallel
rank reloads at the same iteration), ``memory_plan`` (will a launch fit;
``cast-autotune preflight``), ``plugin_config``, ``reload`` and ``launch``
(``--backend sglang``).  The runbook is ``docs/gpu.md``.
"""
