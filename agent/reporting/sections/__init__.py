"""report.md's sections, one module each; agent/reporting/document.py puts them in order."""
