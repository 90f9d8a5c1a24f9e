"""The shared budget in Redis, for deployments whose runs are on several machines (REDIS_URL set).

Slots: a sorted set of holders scored by when their lease ends, in Redis's own clock (TIME), so the
machines' clocks never matter. Taking a slot first drops expired leases: a holder that died (kill -9, a lost
machine) stops renewing and its slot frees itself after lease_s. Waiters queue by ticket. Pacing: one key with
the earliest time the next request may start; each caller reserves its start atomically and waits until then.
"""
from __future__ import annotations

from typing import Any

# KEYS: holders, queue (token → ticket), alive (waiting token → when it is given up), ticket counter.
# ARGV: token, limit, lease_s. Returns 1 when the slot is taken. Waiters are served first come, first served: a run
# whose own requests follow each other never takes a freed slot from one that waited longer. A waiter that stops
# asking (a dead process) leaves the queue after lease_s.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do redis.call('ZREM', KEYS[2], gone) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[1])
end
local ttl = math.ceil(lease * 1000) + 1000
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
if redis.call('ZRANK', KEYS[2], ARGV[1]) < tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1]) then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  return 1
end
redis.call('ZADD', KEYS[3], now + lease, ARGV[1])
return 0
"""
# KEYS[1] the holders; ARGV token, lease_s. Returns 0 when the lease had already run out (and was taken away).
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local until_ = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not until_ or tonumber(until_) < now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000) + 1000)
return 1
"""
# KEYS[1] the next allowed start; ARGV interval_s. Returns the wait (seconds, as a string: Lua numbers come back
# from Redis as integers).
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local start = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local after = start + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%.6f', after), 'PX', math.ceil((after - now) * 1000) + 1000)
return string.format('%.6f', start - now)
"""


class RedisStore:
    """Blocking calls (a few hundred microseconds each on a LAN); the limiter runs them off the event loop."""

    def __init__(self, url: str, *, prefix: str) -> None:
        import redis  # only where a deployment has Redis

        self._redis = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)
        self._prefix = f"{prefix}:judge-budget"
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._renew = self._redis.register_script(_RENEW)
        self._reserve = self._redis.register_script(_RESERVE)

    def _key(self, name: str, part: str) -> str:
        return f"{self._prefix}:{name}:{part}"

    def try_acquire(self, name: str, *, token: str, limit: int, lease_s: float) -> Any:
        """`token` when a slot is free and no earlier waiter is owed it (now held by it), else None (and `token`
        waits in the queue)."""
        keys = [self._key(name, part) for part in ("holders", "queue", "alive", "tickets")]
        return token if int(self._acquire(keys=keys, args=[token, limit, lease_s])) == 1 else None

    def abandon(self, name: str, token: str) -> None:
        """A waiter that stops waiting (cancelled) leaves the queue at once rather than after its lease."""
        self._redis.zrem(self._key(name, "queue"), token)
        self._redis.zrem(self._key(name, "alive"), token)

    def renew(self, name: str, held: Any, *, lease_s: float) -> bool:
        return int(self._renew(keys=[self._key(name, "holders")], args=[held, lease_s])) == 1

    def release(self, name: str, held: Any) -> None:
        self._redis.zrem(self._key(name, "holders"), held)

    def reserve_start(self, name: str, *, interval_s: float) -> float:
        return float(self._reserve(keys=[self._key(name, "next-start")], args=[interval_s]))

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        import redis

        return (redis.RedisError, OSError)
