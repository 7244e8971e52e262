"""The `sources:` section: defaults, the journald/file split, and clear errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import load_config
from agent.errors import ConfigError
from agent.sources.journal import JournalSource
from agent.sources.tailer import FileTailer, TailOptions


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_and_source_objects(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, f"""
sources:
  - path: {tmp_path}/*.log
    max_line_bytes: 4096
  - format: journald
    unit: vllm.service
    directory: {tmp_path}
  - format: journald
    kernel: true
    name: kernel
"""))
    files, unit, kernel = config.sources
    assert (files.start_at, files.poll_interval_seconds, files.use_inotify) == ("end", 1.0, True)
    tailer = FileTailer.from_section(files)
    assert tailer.name == f"{tmp_path}/*.log"
    assert tailer.options == TailOptions(max_line_bytes=4096)
    assert JournalSource.from_section(unit, cursor=None).name == "vllm.service"
    assert kernel.source_name() == "kernel"


@pytest.mark.parametrize(("body", "message"), [
    ("- format: journald\n    path: /var/log/x", "not path"),
    ("- format: journald", "either unit"),
    ("- format: journald\n    unit: a.service\n    kernel: true", "either unit"),
    ("- path: /x\n    kernel: true", "apply to journald sources"),
    ("- path: /x\n    max_line_bytes: 10", "greater than or equal to 64"),
    ("- path: /x\n    poll_interval: 1", "did you mean 'poll_interval_seconds'"),
    ("- path: /x\n    start_at: middle", "'end' or 'beginning'"),
])
def test_bad_sources_name_the_field(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "sources:\n  " + body + "\n"))
    text = str(info.value)
    assert "sources[0]" in text and message in text, text
