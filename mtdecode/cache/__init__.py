"""The KV-cache manager every strategy shares."""

from mtdecode.cache.kv import KVCache, cache_keyword

__all__ = ["KVCache", "cache_keyword"]
