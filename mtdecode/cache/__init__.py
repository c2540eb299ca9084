"""The KV-cache manager every strategy shares."""

from mtdecode.cache.kv import KVCache

__all__ = ["KVCache"]
