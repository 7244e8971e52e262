"""Config errors name the file, the line, the field and what was expected — all of them at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import load_config
from agent.errors import ConfigError
from agent.records import KvDtype

DATA = Path(__file__).parent.parent / "data" / "config"
ROOT = Path(__file__).parent.parent.parent


def problems(name: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_config(DATA / name)
    return exc.value.problems


def test_valid_config_loads() -> None:
    cfg = load_config(DATA / "valid-full.yaml")
    assert cfg.model.preset == "qwen2.5-7b" and cfg.server.max_num_seqs == 13
    assert cfg.metrics.listen == "127.0.0.1"
    assert "1 source(s)" in cfg.summary()


def test_shipped_example_config_is_valid() -> None:
    cfg = load_config(ROOT / "examples" / "config.yaml")
    assert cfg.server.max_num_seqs == 13 and len(cfg.sources) == 3


def test_every_type_problem_is_reported_with_line_and_expectation() -> None:
    found = problems("bad-types.yaml")
    path = str(DATA / "bad-types.yaml")
    assert len(found) == 4
    assert found[0] == f"{path}:2: server.gpu_memory_fraction: expected a number less than or equal to 1, got 1.5"
    assert found[1].startswith(f"{path}:3: server.max_num_seqs: expected a number greater than 0")
    assert found[2] == f"{path}:4: server.kv_cache_dtype: expected 'auto', 'bf16', 'fp16' or 'fp8', got 'int3'"
    assert found[3].startswith(f"{path}:6: metrics.port:")


def test_unknown_keys_suggest_the_closest_field() -> None:
    found = problems("bad-unknown-key.yaml")
    assert any(":2: server.max_num_seq: unknown field; did you mean 'max_num_seqs'?" in p for p in found)
    assert any(":3: limitz: unknown field; did you mean 'limits'?" in p for p in found)


def test_model_given_two_ways() -> None:
    (only,) = problems("bad-model-ways.yaml")
    assert ":1: model: give only one of preset, config_json, or layers/kv_heads/head_dim" in only


def test_model_shape_needs_all_three_numbers() -> None:
    (only,) = problems("bad-model-partial.yaml")
    assert "layers, kv_heads and head_dim must be given together" in only


def test_source_problems() -> None:
    found = problems("bad-source.yaml")
    assert any(":2: sources[0]: a docker source needs a path" in p for p in found)
    assert any(":4: sources[1].format: expected 'plain', 'docker', 'cri' or 'journald', got 'syslog'" in p
               for p in found)


def test_yaml_syntax_error_has_line_and_column() -> None:
    (only,) = problems("bad-yaml-syntax.yaml")
    assert only.startswith(f"{DATA / 'bad-yaml-syntax.yaml'}:3:1: YAML syntax error")


def test_top_level_must_be_a_mapping() -> None:
    (only,) = problems("bad-top-level.yaml")
    assert "expected a mapping of sections at the top level, got list" in only


def test_missing_file() -> None:
    (only,) = problems("absent.yaml")
    assert only.endswith("absent.yaml: file not found")


def test_vllm_config_fills_server_settings() -> None:
    cfg = load_config(DATA / "with-vllm-config.yaml")
    s = cfg.server
    assert (s.gpu_memory_fraction, s.max_num_seqs, s.max_model_len) == (0.85, 48, 4096)
    assert s.kv_cache_dtype is KvDtype.FP8
    assert cfg.served_model == "Qwen/Qwen2.5-7B-Instruct"


def test_vllm_config_disagreeing_with_server_is_an_error() -> None:
    (only,) = problems("vllm-disagrees.yaml")
    assert ":3: server.max_num_seqs: 64 disagrees with" in only and "(48); set it in one place" in only


def test_inline_vllm_keys_with_either_spelling() -> None:
    cfg = load_config(DATA / "inline-vllm.yaml")
    assert cfg.server.gpu_memory_fraction == 0.95 and cfg.server.tensor_parallel_size == 2


def test_missing_vllm_config_file_is_named() -> None:
    (only,) = problems("vllm-config-missing.yaml")
    assert ":1: vllm_config:" in only and "no-such-file.yaml: file not found" in only


def test_relative_config_json_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text("model:\n  config_json: models/config.json\n")
    cfg = load_config(tmp_path / "cfg.yaml")
    assert cfg.model.config_json == tmp_path / "models" / "config.json"


@pytest.mark.parametrize("text", ["", "\n\n", "# every line commented out\n# sources: []\n"])
def test_an_empty_file_is_refused_and_braces_are_all_defaults(tmp_path: Path, text: str) -> None:
    (tmp_path / "empty.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "empty.yaml")
    assert caught.value.problems == [f"{tmp_path / 'empty.yaml'}: the file is empty (no settings): write at least "
                                     "one section (sources:, model:, metrics: …), or `{}` for every default"]
    (tmp_path / "defaults.yaml").write_text("{}\n")
    cfg = load_config(tmp_path / "defaults.yaml")
    assert cfg.sources == [] and cfg.metrics.port == 9842
