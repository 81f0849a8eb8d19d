"""Stores: bytes in, bytes out, under '/'-separated keys (see base.py for the contract every backend keeps)."""

from .base import COPY_CHUNK, Capabilities, Store, check_key
from .urls import is_zip_url, open_store

__all__ = ["COPY_CHUNK", "Capabilities", "Store", "check_key", "is_zip_url", "open_store"]
