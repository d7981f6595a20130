"""Reporting: markdown and HTML reports, comparisons and exports (report)."""
