"""One Capacity: the paper budget until the engine reports, then the engine's figure at the same length."""

from __future__ import annotations

import pytest

from agent.capacity.budget import GIB, BudgetInputs, compute
from agent.capacity.capacity import capacity_of, paper_budget
from agent.capacity.shapes import find_preset
from agent.config import Config

QWEN7B = find_preset("qwen2.5-7b")
# The budget method's worked example: Qwen2.5-7B, 24 GiB, util 0.90, 1.6 GiB overhead, 8192 tokens → 13.
BUDGET = compute(BudgetInputs(QWEN7B, 24 * GIB, 0.90, int(14.2 * GIB), int(1.6 * GIB), 8192))


def test_the_paper_governs_until_the_engine_reports() -> None:
    cap = capacity_of(BUDGET)
    assert (cap.governs, cap.max_concurrency, cap.paper_max_concurrency) == ("paper", 13, 13)
    assert cap.disagreement_ratio is None


def test_the_engines_kv_tokens_govern_restated_at_the_papers_length() -> None:
    cap = capacity_of(BUDGET, {"kv_cache_tokens": 98304.0, "max_model_len": 32768.0}, engine="vllm")
    assert cap.governs == "engine"
    assert cap.engine_max_concurrency == pytest.approx(98304 / 8192)
    assert cap.max_concurrency == 12
    assert cap.disagreement_ratio == pytest.approx(12 / 13 - 1)  # 7.7 %: within the rule's 10 %


def test_a_printed_concurrency_is_scaled_by_the_length_it_was_printed_for() -> None:
    cap = capacity_of(BUDGET, {"max_concurrency": 1.3, "max_model_len": 32768.0})
    assert cap.engine_max_concurrency == pytest.approx(1.3 * 32768 / 8192)
    assert cap.max_concurrency == 5 and cap.disagreement_ratio == pytest.approx(1.3 * 4 / 13 - 1)


def test_without_a_paper_budget_the_engine_stands_at_its_own_length() -> None:
    cap = capacity_of(None, {"max_concurrency": 1.3, "max_model_len": 32768.0}, engine="e")
    assert (cap.governs, cap.max_concurrency, cap.tokens_per_request) == ("engine", 1, 32768)
    cap = capacity_of(None, {"gpu_blocks": 1000.0, "block_size": 16.0, "max_model_len": 4000.0})
    assert cap.engine_kv_cache_tokens == 16000 and cap.max_concurrency == 4
    assert capacity_of(None, {}).governs is None and capacity_of(None).max_concurrency is None


def test_a_config_without_the_model_has_no_paper_budget() -> None:
    assert paper_budget(None) is None
    assert paper_budget(Config()) is None
