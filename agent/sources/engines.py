"""Which engine instance a log file belongs to, so a glob over several engines' logs is several series.

A source whose `path` is one file (or a journald unit) is one engine, named by the source. A glob
(`/var/log/vllm/*.log`, `/var/lib/docker/containers/*/*-json.log`, `/var/log/pods/*/*/*.log`) matches
one file per engine instance, and each must be judged on its own (the last file written must not win
the gauges). The engine is `<source>/<identity>`, where the identity is stable across rotation and
across a container's re-creation, so a restart does not start new series: the Docker container's
name (from its `config.v2.json` beside the log; the 12-hex id only where that cannot be read), the
Kubernetes workload and container of a CRI log (the pod name without the ReplicaSet hash and the
random suffix a Deployment or DaemonSet adds), or the file's name without its rotation suffix. The
number of engines is bounded by the containers and workloads on the node (docs/rules.md, "One series
per engine").
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path, PurePosixPath

_GLOB = re.compile(r"[*?\[]")
_ROTATED = re.compile(r"(?:\.\d+|[-.]\d{8}(?:\d{2,6})?)?(?:\.gz|\.xz|\.zst|\.bz2)?$")
_DOCKER = re.compile(r"/containers/([0-9a-f]{12})[0-9a-f]{52}/")
_PODS = re.compile(r"/pods/(?P<ns>[^_/]+)_(?P<pod>[^_/]+)_[^/]+/(?P<container>[^/]+)/\d+\.log")
_CONTAINERS = re.compile(r"/containers/(?P<pod>[^_/]+)_(?P<ns>[^_/]+)_(?P<container>.+)-[0-9a-f]{64}\.log")
# Kubernetes' generated name suffixes use this alphabet (no vowels, no 0, 1, 3): a ReplicaSet's pod-template
# hash then the pod's 5 random characters (a Deployment's pods), or the 5 alone (a DaemonSet's, a Job's).
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_GENERATED = re.compile(rf"-{_SAFE}{{6,10}}-{_SAFE}{{5}}$|-{_SAFE}{{5}}$")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def is_glob(pattern: str | None) -> bool:
    return bool(pattern) and _GLOB.search(pattern or "") is not None


def workload(pod: str) -> str:
    """A pod's workload: the name without what Kubernetes generated (`vllm-7d9f8c6b5d-x2kqz` is `vllm`); a
    StatefulSet's `vllm-0` keeps its ordinal, which survives the pod's re-creation."""
    return _GENERATED.sub("", pod, count=1) or pod


@lru_cache(maxsize=256)
def docker_name(container_dir: str) -> str | None:
    """The container's name from Docker's `config.v2.json` in its directory (`"Name": "/vllm"`), or None
    when it cannot be read or is not a plain name. Cached: a container's name is fixed while its log lives."""
    try:
        name = json.loads((Path(container_dir) / "config.v2.json").read_text("utf-8")).get("Name")
    except (OSError, ValueError, AttributeError):
        return None
    name = name.lstrip("/") if isinstance(name, str) else ""
    return name if _NAME.fullmatch(name) else None


def identity(path: str) -> str:
    """The engine instance a file belongs to, stable across rotation (`vllm.log.1` is `vllm`) and across a
    container's re-creation (its name, its workload)."""
    if m := _DOCKER.search(path):
        return docker_name(path[:m.end() - 1]) or m.group(1)
    if m := _PODS.search(path) or _CONTAINERS.search(path):
        return f"{workload(m.group('pod'))}/{m.group('container')}"
    name = PurePosixPath(path).name
    name = _ROTATED.sub("", name, count=1)
    return name.removesuffix(".log") or name


def engine_name(source: str, pattern: str | None, path: str) -> str:
    """`source` for a single-file or journald source; `<source>/<identity>` for a file a glob matched."""
    if not is_glob(pattern):
        return source
    return f"{source}/{identity(path)}"
