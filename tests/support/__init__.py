"""Test helpers shared across the suite (real checkers and real servers; no mocks)."""
