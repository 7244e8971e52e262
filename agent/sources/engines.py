"""Which engine instance a log file belongs to, so a glob over several engines' logs is several series.

A source whose `path` is one file (or a journald unit) is one engine, named by the source. A glob
(`/var/log/vllm/*.log`, `/var/lib/docker/containers/*/*-json.log`, `/var/log/pods/*/*/*.log`) matches
one file per engine instance, and each must be judged on its own (the last file written must not win
the gauges). The engine is `<source>/<identity>`, where the identity is stable across rotation: the
Docker container id (12 hex digits), the Kubernetes pod and container of a CRI log, or the file's name
without its rotation suffix. The number of engines is bounded by the files the glob matches (each its
own series; docs/rules.md, "One series per engine").
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

_GLOB = re.compile(r"[*?\[]")
_ROTATED = re.compile(r"(?:\.\d+|[-.]\d{8}(?:\d{2,6})?)?(?:\.gz|\.xz|\.zst|\.bz2)?$")
_DOCKER = re.compile(r"/containers/([0-9a-f]{12})[0-9a-f]{52}/")
_PODS = re.compile(r"/pods/(?P<ns>[^_/]+)_(?P<pod>[^_/]+)_[^/]+/(?P<container>[^/]+)/\d+\.log")
_CONTAINERS = re.compile(r"/containers/(?P<pod>[^_/]+)_(?P<ns>[^_/]+)_(?P<container>.+)-[0-9a-f]{64}\.log")


def is_glob(pattern: str | None) -> bool:
    return bool(pattern) and _GLOB.search(pattern or "") is not None


def identity(path: str) -> str:
    """The engine instance a file belongs to, stable across rotation (`vllm.log.1` is `vllm`)."""
    if m := _DOCKER.search(path):
        return m.group(1)
    if m := _PODS.search(path) or _CONTAINERS.search(path):
        return f"{m.group('pod')}/{m.group('container')}"
    name = PurePosixPath(path).name
    name = _ROTATED.sub("", name, count=1)
    return name.removesuffix(".log") or name


def engine_name(source: str, pattern: str | None, path: str) -> str:
    """`source` for a single-file or journald source; `<source>/<identity>` for a file a glob matched."""
    if not is_glob(pattern):
        return source
    return f"{source}/{identity(path)}"
