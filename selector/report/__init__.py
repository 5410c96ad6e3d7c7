"""The recommendation report: HTML (self-contained), Markdown and JSON files, and a console summary."""

from selector.report.render import write_report
from selector.report.terminal import print_terminal_summary, render_terminal_summary

__all__ = ["write_report", "render_terminal_summary", "print_terminal_summary"]
