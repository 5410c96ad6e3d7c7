"""The base of every record type: a pydantic model that refuses unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown fields are an error, so a misspelt or stale field never passes silently."""
    model_config = ConfigDict(extra="forbid", protected_namespaces=())
