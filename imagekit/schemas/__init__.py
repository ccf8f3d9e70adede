"""Checked-in JSON Schemas of every record model (`*.json` here), and the code that makes them.

Which models: one list, `MODELS` in `imagekit.schemas.export`; regenerate with
`imagekit schemas export imagekit/schemas` (or `make schemas`), verify with
`imagekit schemas check`.
"""
