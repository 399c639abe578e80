"""``cast-autotune``: measure a device's cost tables, record draft-tree traces, tune
CAST's thresholds offline by trace replay, confirm them live, and publish the
result as a YAML profile a running server hot-reloads.

Data flow: ``profile`` → measurements table, ``collect`` → traces table, ``tune``
(Optuna over replay) → ``profiles/<label>.yaml`` (+ published table).  Everything
lives in one SQLite file so runs are resumable and auditable.
"""
