"""Renderers: turn records and reports into text, Markdown, HTML or JSON. Views never write to the store."""
