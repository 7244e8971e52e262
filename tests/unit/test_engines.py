"""Engine names for the files a glob matches: stable across rotation and across a container's re-creation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.sources.engines import docker_name, engine_name, workload

ID_A, ID_B = "3f2a9c1b7d4e" + "a" * 52, "9b8c7d6e5f4a" + "b" * 52


def docker_log(root: Path, container_id: str, name: str | None) -> str:
    """A container directory as Docker writes it: the json-file log and, when named, config.v2.json."""
    directory = root / "containers" / container_id
    directory.mkdir(parents=True)
    if name is not None:
        (directory / "config.v2.json").write_text(json.dumps({"ID": container_id, "Name": name, "State": {}}))
    log = directory / f"{container_id}-json.log"
    log.write_text("")
    return str(log)


def test_a_recreated_docker_container_keeps_its_name_and_so_its_engine(tmp_path: Path) -> None:
    pattern = str(tmp_path / "containers" / "*" / "*-json.log")
    before = engine_name("docker", pattern, docker_log(tmp_path / "1", ID_A, "/vllm-qwen"))
    after = engine_name("docker", pattern, docker_log(tmp_path / "2", ID_B, "/vllm-qwen"))  # docker rm; run
    assert before == after == "docker/vllm-qwen"


def test_without_a_readable_name_the_short_id_names_it(tmp_path: Path) -> None:
    pattern = "/var/lib/docker/containers/*/*-json.log"
    assert engine_name("docker", pattern, docker_log(tmp_path, ID_A, None)) == "docker/3f2a9c1b7d4e"
    docker_name.cache_clear()
    odd = docker_log(tmp_path / "odd", ID_B, "/name with spaces")  # never a label value Docker would not allow
    assert engine_name("docker", pattern, odd) == "docker/9b8c7d6e5f4a"


@pytest.mark.parametrize(("pod", "expected"), [
    ("vllm-7d9f8c6b5d-x2kqz", "vllm"),  # a Deployment's pod: ReplicaSet hash and random suffix
    ("sglang-router-6b7c8d9f4-bcdfg", "sglang-router"),
    ("node-agent-x7k2p", "node-agent"),  # a DaemonSet's pod
    ("vllm-0", "vllm-0"),  # a StatefulSet's ordinal is stable already
    ("llama", "llama"),
])
def test_a_pod_names_its_workload(pod: str, expected: str) -> None:
    assert workload(pod) == expected


def test_kubernetes_logs_are_named_by_workload_and_container() -> None:
    pods = "/var/log/pods/*/*/*.log"
    first = engine_name("k8s", pods, "/var/log/pods/ml_vllm-7d9f8c6b5d-x2kqz_0a1b/engine/0.log")
    again = engine_name("k8s", pods, "/var/log/pods/ml_vllm-7d9f8c6b5d-q9wzt_7c8d/engine/0.log")  # re-created
    assert first == again == "k8s/vllm/engine"
    cri = "/var/log/containers/vllm-7d9f8c6b5d-x2kqz_ml_engine-" + "c" * 64 + ".log"
    assert engine_name("k8s", "/var/log/containers/*.log", cri) == "k8s/vllm/engine"
