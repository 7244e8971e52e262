"""Judgement: rule files evaluated over stored windows against the capacity, producing findings."""
