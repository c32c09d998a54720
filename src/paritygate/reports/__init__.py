"""Renderings of results: text/rich tables, JSON, Markdown, JUnit XML and HTML.

Reports render result objects (or their JSON form); they never compute verdicts.
"""
