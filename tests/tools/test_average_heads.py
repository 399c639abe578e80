"""tools/average_heads.py: sibling heads averaged tensor by tensor, on hand-made heads."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tools.average_heads import main


def make_head(folder, fc: float, d2t=(0, 2, 5), config=None):
    """A head folder with one fp16 weight filled with ``fc``, a vocabulary map and a config."""
    folder.mkdir()
    save_file({"fc.weight": torch.full((2, 3), fc, dtype=torch.float16), "d2t": torch.tensor(d2t),
               "t2d": torch.tensor([True, False, True])}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config or {"hidden_size": 3, "draft_vocab_size": 3}))
    return folder


def test_floats_are_averaged_and_the_vocabulary_kept(tmp_path):
    a, b = make_head(tmp_path / "a", 1.0), make_head(tmp_path / "b", 2.0)
    assert main(["--output", str(tmp_path / "soup"), str(a), str(b)]) == 0
    soup = load_file(tmp_path / "soup" / "model.safetensors")
    assert soup["fc.weight"].dtype == torch.float16
    assert torch.equal(soup["fc.weight"], torch.full((2, 3), 1.5, dtype=torch.float16))
    assert soup["d2t"].tolist() == [0, 2, 5] and soup["t2d"].tolist() == [True, False, True]
    assert json.loads((tmp_path / "soup" / "config.json").read_text())["draft_vocab_size"] == 3
    with safe_open(tmp_path / "soup" / "model.safetensors", "pt") as stored:  # as eagle.save_draft writes heads
        assert stored.metadata() == {"format": "pt"}


def test_three_heads_average_equally(tmp_path):
    heads = [str(make_head(tmp_path / name, value)) for name, value in (("a", 1.0), ("b", 2.0), ("c", 6.0))]
    assert main(["--output", str(tmp_path / "soup"), *heads]) == 0
    assert load_file(tmp_path / "soup" / "model.safetensors")["fc.weight"][0, 0].item() == 3.0


@pytest.mark.parametrize("second, said", [
    ({"d2t": (0, 2, 6)}, "d2t differs"),
    ({"config": {"hidden_size": 4, "draft_vocab_size": 3}}, "config.json differs"),
])
def test_heads_that_do_not_match_are_refused(tmp_path, capsys, second, said):
    a, b = make_head(tmp_path / "a", 1.0), make_head(tmp_path / "b", 2.0, **second)
    assert main(["--output", str(tmp_path / "soup"), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
    assert not (tmp_path / "soup").exists()


def test_one_head_or_a_folder_that_is_no_head_is_refused(tmp_path, capsys):
    a = make_head(tmp_path / "a", 1.0)
    assert main(["--output", str(tmp_path / "soup"), str(a)]) == 2
    assert "at least two heads" in capsys.readouterr().err
    assert main(["--output", str(tmp_path / "soup"), str(a), str(tmp_path)]) == 2
    assert "not a draft head folder" in capsys.readouterr().err
