"""report.md / report.html / plots, compare, export, site: each renders what agent.judging decided."""

from agent import escape as escape  # the escaping helpers (agent/escape.py), still reachable as reporting's
