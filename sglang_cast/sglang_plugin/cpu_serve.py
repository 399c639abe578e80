"""``python -m sglang_cast.sglang_plugin.cpu_serve [SGLang's flags]``: SGLang's own
``launch_server`` on a CPU, with every flag SGLang has (``--speculative-adaptive``,
say, which ``sglang_cast.launch_server`` does not expose), set up as `cpu_runtime`
describes and with the flags every CPU server needs added where not given
(``cpu_runtime.cpu_server_flags``: ``--device cpu --attention-backend intel_amx
--disable-cuda-graph --sleep-on-idle``).  CAST and GOODPUT read their profile from
``$SGLANG_CAST_PROFILE``.
"""

from __future__ import annotations

import sys

from .cpu_runtime import cpu_server_flags, enter_cpu_engine
from .launch import run_sglang_server


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    enter_cpu_engine()  # before anything imports SGLang
    run_sglang_server([*argv, *cpu_server_flags(argv)], on_cpu=True)


if __name__ == "__main__":
    main()
