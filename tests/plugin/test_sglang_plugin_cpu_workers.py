"""SGLang 0.5.23's own workers built in one process on its CPU engine, as
``cast-autotune profile --backend sglang`` builds them without a GPU
(``profile_forwards.SGLangForwards``): the target ``TpModelWorker`` and the EAGLE v2
worker with the shipped head loaded by SGLang's ``LlamaForCausalLMEagle3``.

Checked: the head's ``lm_head`` inside SGLang is the file's (the shipped config once said
``tie_word_embeddings: true`` and SGLang drafted through the target's embedding instead,
accept length 1.03), and both forwards the profile times run.  In a subprocess: SGLang
must be imported after ``cpu_runtime.enter_cpu_engine`` (``is_cpu`` is cached), and
other test modules import it first in this one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support import ROOT
from support.plugin import RUNTIME, require_sglang

require_sglang(RUNTIME)


BUILD_AND_CHECK = """
import json, sys
import torch
from safetensors.torch import load_file
from sglang_cast.sglang_plugin.cpu_runtime import enter_cpu_engine
enter_cpu_engine()
from sglang_cast.sglang_plugin.profile_forwards import SGLangProfileLaunch, start_ranks

model, head = sys.argv[1], sys.argv[2]
launch = SGLangProfileLaunch(model, head, "float32", context_length=48, max_batch_size=2, topk=4, max_n=8,
                             on_cpu=True)
forwards, followers = start_ranks(launch)
draft_model = forwards.draft_worker.draft_runner.model
target_model = forwards.target.model_runner.model
shipped = load_file(f"{head}/model.safetensors")["lm_head.weight"].float()
in_sglang = draft_model.lm_head.weight.detach().float()[: shipped.shape[0]]
with torch.inference_mode():
    for role, n in (("target", 1), ("target", 5), ("draft", 3)):
        forwards.forward(role, 2, 32, n)()
print(json.dumps({
    "class": type(draft_model).__name__,
    "followers": followers is not None,
    "lm_head_is_the_files": bool(torch.equal(in_sglang, shipped)),
    "lm_head_is_the_targets_embedding": bool(
        in_sglang.shape == target_model.model.embed_tokens.weight.shape
        and torch.equal(in_sglang, target_model.model.embed_tokens.weight.detach().float())),
}))
"""


def test_sglangs_eagle3_class_loads_the_shipped_heads_own_lm_head_and_the_profiled_forwards_run(tmp_path):
    from sglang_cast.engine.build import default_draft_path
    from sglang_cast.models.loader import resolve_model_dir

    model, head = str(resolve_model_dir(None)), str(default_draft_path(None))
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", BUILD_AND_CHECK, model, head], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == {"class": "LlamaForCausalLMEagle3", "followers": False, "lm_head_is_the_files": True,
                      "lm_head_is_the_targets_embedding": False}
