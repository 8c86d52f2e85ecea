"""Where the suite's files are, for tests at any depth under tests/ (tests mirror the packages)."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
BENCHMARKS = ROOT / "benchmarks"
