"""One module per ``cast-autotune`` command, each with ``run(args) -> exit code``.

``run`` turns the parsed namespace into the command's one options dataclass at
its top (``TuneOptions.from_args(args)``, ...) and reads typed fields from there
on; what it prints is built by `autotune.report`; an `AutotuneError` it raises
becomes one line on stderr and the error's exit code in `autotune.cli.main`.
`common` holds what several commands do alike (device, label, formats, model pair,
database, tuning config).
"""
