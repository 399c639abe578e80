"""Train the shipped EAGLE-3 draft head for the embedded SmolLM2-135M-Instruct on a CPU.

One command (``python -m sglang_cast.training``, or ``python tools/train_draft.py``) runs
every stage; each writes its output into ``<work-dir>/<stage>.partial`` and renames it to
``<work-dir>/<stage>`` when complete, so an interrupted run resumes where it stopped (long
stages also resume inside: generation and feature shards, training checkpoints,
per-benchmark evaluation files) and a finished stage is skipped (`workspace.run_stage`).

    self_instruct  the target invents user requests for itself (chat template, sampling)
    prompts        + requests built from stdlib docstrings, from our templates and (with
                   ``--task-prompts``) multi-part task requests; dedupe; benchmark filter
    responses      the target's greedy answers (continuous batching) and, captured in the
                   same forwards, its residual streams entering layers (2, 15, 27), fp16
    vocab          EAGLE-3 draft vocab: the most frequent response tokens (d2t / t2d),
                   or the vocab of ``--init-head`` when continuing an earlier head
    train          EAGLE-3 training-time test: K unrolled draft steps per position,
                   from a fresh head or from ``--init-head``
    export         fp16 safetensors + config.json in the public EAGLE-3 layout
    eval           chain (top-1) acceptance α and EAGLE-2 tree τ on mt_bench / humaneval

Modules, in the order a run uses them:

    config      the typed settings of data, training and evaluation (`PipelineConfig`)
    workspace   resumable stage directories, the settings record that decides reuse, JSON lines
    target      the frozen target model, the one place an `Engine` is built, chat-template
                ids and sampled generation
    benchmark_filter  the benchmark prompts no training prompt may equal or overlap
    templates   the words and templates of prompt_templates.yaml (data, loaded at import)
    docstrings  requests mined from the installed standard library's docstrings
    tasks       the multi-part task requests of ``--task-prompts``
    prompts     the self_instruct and prompts stages: self-instruct and template requests
    responses   the responses stage: greedy answers with the target features they compute
    vocab       the vocab stage: the draft vocabulary, chosen or swapped
    head        a fresh head, an exported head read back (``--init-head``), the export stage
    features    training sequences, feature shards and padded batches
    ttt         training-time test: the unrolled forward on the head's own layer, its loss
    train       the train stage: schedule, optimiser, checkpoints, validation
    evaluate    the eval stage: α and τ from the engine's own decoding
    pipeline    every stage in order, with each stage's settings
    cli         flags -> `PipelineConfig`
    gap         where a head loses acceptance (``tools/draft_gap.py``)
    online      the same training online on a lent GPU: answers made and trained on in
                rounds, features recomputed per batch (``tools/gpu_kit.sh train``)

Why ``--init-head``: generating and training on all the data a good head needs takes
longer than one run on a 2-core machine, and the machine starts empty.  The shipped head
is the state that survives, so a later run answers *new* prompts (another ``--seed``) and
continues training that head on them: each run adds data without redoing the last one's.
"""
