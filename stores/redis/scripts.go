package redisstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Each state change that needs a check is one Lua script, so it is atomic
// on the server and costs one round trip. Every script is passed exactly
// one key, KEYS[1], the record's. Most also touch the record's waiter
// mark, KEYS[1] .. "w" (see notifyLua), which they derive instead of
// declaring it: the mark has the record key's hash tag, so it lies in the
// same hash slot, on the same node, which keeps the scripts valid on Redis
// Cluster (although Redis asks scripts to declare every key they access).
// The scripts read the record's fixed header (see codec.go: state at byte
// 1, lease end at 2-21, expiry at 22-41, created at 42-61, token length at
// 62-66, token from 67, in Lua's 1-based positions) and compare times as
// equal-length digit strings. Times come from the engine; the scripts
// never read the server's clock. Each write sets the key's TTL (PX), so
// Redis reclaims the record by itself: a completed record at its expiry;
// an in-progress one at LeaseEnd + (LeaseEnd - CreatedAt), a lease past
// its lease end, so that a Complete or Extend that comes late (the store
// was failing over) still finds it and lands while nobody took the key
// over.
//
// The scripts run as few commands as they can: a completion is GET, SET
// and DEL of the waiter mark; a release GET, DEL and DEL of the mark.
// They PUBLISH only for a record that a waiter marked (see markScript and
// notifyLua), so a request nobody waits for publishes nothing. The
// notification channel and the record id are cut from KEYS[1] (the
// prefix, then "{" id "}"), so no script is sent them.

// claimScript takes the key or returns the record that blocks it. Claim
// first sends the script's first command on its own, which settles every
// case but one: a record that Redis still holds but that has ended at now.
// Only then does it run the script, which takes such a record over.
//
//	KEYS[1] record key
//	ARGV    now, new in-progress record, TTL in ms
//
// A waiter mark (see markScript) of the record taken over is kept as long
// as the new claim: its waiters still wait for the key.
//
// It returns 1 when the claim was taken, otherwise the blocking record. A
// record whose state byte is neither '1' nor '2' is never taken over: it
// is returned, and Go reports it corrupt, as the first command's path does.
// SET with both NX and GET needs Redis 7.0.
var claimScript = redis.NewScript(`
local k, now = KEYS[1], ARGV[1]
local v = redis.call('SET', k, ARGV[2], 'NX', 'PX', ARGV[3], 'GET')
if not v then return 1 end
local st = string.byte(v, 1)
if (st ~= 49 and st ~= 50) or
   (now < string.sub(v, 22, 41) and (st == 50 or now < string.sub(v, 2, 21))) then
  return v
end
redis.call('SET', k, ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', k .. 'w', ARGV[3])
return 1
`)

// keepPX is Lua for keepPX(lease end, created, ttl): the TTL, in ms, of
// an in-progress record whose lease end is ttl ms away: ttl plus its
// lease so far, LeaseEnd - CreatedAt, rounded up, at most maxTTLMillis.
// The two times are 20-digit strings (see codec.go), too long for Lua's
// doubles, so their difference is taken in two 10-digit halves; it is
// exact below 2^53 ns (104 days) and a millisecond more beyond.
var keepPX = fmt.Sprintf(`
local function keepPX(e, c, ttl)
  local d = (tonumber(string.sub(e, 1, 10)) - tonumber(string.sub(c, 1, 10))) * 1e10 +
            (tonumber(string.sub(e, 11)) - tonumber(string.sub(c, 11)))
  local px = tonumber(ttl)
  if d > 0 then
    px = px + math.ceil(d / 1e6)
    if d >= 9007199254740992 then px = px + 1 end
  end
  return string.format('%%.0f', math.min(px, %d))
end`, maxTTLMillis)

// notifyLua is Lua for notify(k): it deletes the waiter mark of the
// record at k and, when there was one, publishes the record's id on the
// Store's channel. The mark is the key k .. "w", in the record's hash
// slot, so a script reaches it on Redis Cluster too; it is derived, not
// passed, to keep it out of every call's bytes. The channel is the prefix
// (k without its last 34 bytes, "{" id "}") then "notify".
const notifyLua = `
local function notify(k)
  if redis.call('DEL', k .. 'w') == 1 then
    redis.call('PUBLISH', string.sub(k, 1, -35) .. 'notify', string.sub(k, -33, -2))
  end
end
`

// markScript marks a record as waited for, so that the script that ends
// its claim publishes: when the record is in progress it sets the mark
// key (see notifyLua) with the record's own remaining TTL, which the
// extend script moves with the record's. It returns the record's state
// byte as it found it ("" when there is none), so that Watch wakes at
// once a waiter that came after the claim ended: the mark and every
// script that ends a claim run one after the other on the server, so
// either the mark comes first and the ending publishes, or the mark
// sees the record ended.
//
//	KEYS[1] record key
var markScript = redis.NewScript(`
local k = KEYS[1]
local st = redis.call('GETRANGE', k, 0, 0)
if st == '1' then
  local t = redis.call('PTTL', k)
  if t > 0 then redis.call('SET', k .. 'w', '', 'PX', t) end
end
return st
`)

// heldPrelude loads the record into v and returns 0 from the script
// unless it is in progress and holds the token ARGV[1], whatever its
// lease end: a lease that ended without anyone taking the key over is
// still the token's. n is the token's length. When ARGV[sync] is "1" (WithReplicas), a completed record has
// its expiry set again, unchanged, and the script returns 2: that write
// carries the connection's replication offset past the record, so the
// WAIT pipelined after the script tells whether the record has reached
// the replicas (WAIT counts only its own connection's writes). sync 0
// leaves that branch out.
func heldPrelude(sync int) string {
	completed := ""
	if sync > 0 {
		completed = fmt.Sprintf(`
if v and string.byte(v, 1) == 50 and ARGV[%d] == '1' then
  local t = redis.call('PEXPIRETIME', k)
  if t > 0 then redis.call('PEXPIREAT', k, t) end
  return 2
end`, sync)
	}
	return `
local k = KEYS[1]
local v = redis.call('GET', k)` + completed + `
if not v or string.byte(v, 1) ~= 49 then return 0 end
local n = tonumber(string.sub(v, 62, 66))
if not n or string.sub(v, 67, 66 + n) ~= ARGV[1] then return 0 end
`
}

// completeScript stores the result of a held claim. The completed
// record keeps the created time, the token and the fingerprint.
//
//	KEYS[1] record key
//	ARGV    token, expires at, TTL in ms, the result up to its body
//	        (encodeResultHead), the body, and "1" under WithReplicas
//
// It returns 1 when the record was completed, 0 when the claim is lost,
// and 2 (under WithReplicas) when the record is completed already.
var completeScript = redis.NewScript(notifyLua + heldPrelude(6) + `
redis.call('SET', k, '2' .. string.rep('0', 20) .. ARGV[2] .. string.sub(v, 42) ..
  ARGV[4] .. ARGV[5], 'PX', ARGV[3])
notify(k)
return 1
`)

// releaseScript deletes a held, in-progress claim.
//
//	KEYS[1] record key
//	ARGV    token
//
// It returns 1 when the record was deleted, 0 when the claim is lost.
var releaseScript = redis.NewScript(notifyLua + heldPrelude(0) + `
redis.call('DEL', k)
notify(k)
return 1
`)

// extendScript moves the lease end (and with it the expiry) of a held
// claim, and keeps the record a lease past the new lease end; a waiter
// mark lives as long.
//
//	KEYS[1] record key
//	ARGV    token, new lease end, TTL to it in ms, and "1" under
//	        WithReplicas
//
// It returns 1 when the lease moved, 0 when the claim is lost, and 2
// (under WithReplicas) when the record is completed.
var extendScript = redis.NewScript(keepPX + heldPrelude(4) + `
local px = keepPX(ARGV[2], string.sub(v, 42, 61), ARGV[3])
redis.call('SET', k, '1' .. ARGV[2] .. ARGV[2] .. string.sub(v, 42), 'PX', px)
redis.call('PEXPIRE', k .. 'w', px)
return 1
`)

// touchScript sets the expiry of a held, in-progress claim again,
// unchanged: under WithReplicas, a claim that found its own record (see
// Store.ownClaim) pipelines it with WAIT, which then counts the replicas
// that have the record.
//
//	KEYS[1] record key
//	ARGV    token
//
// It returns 1 when the claim is held, 0 otherwise.
var touchScript = redis.NewScript(heldPrelude(0) + `
local t = redis.call('PEXPIRETIME', k)
if t > 0 then redis.call('PEXPIREAT', k, t) end
return 1
`)

// evictScript deletes a record, in progress or completed, that holds a
// token, and notifies waiters.
//
//	KEYS[1] record key
//	ARGV    token
//
// It returns 1 when the record was deleted, 0 when there is none or it
// holds another token (a record completed before tokens were kept holds
// none, and is never evicted).
var evictScript = redis.NewScript(notifyLua + `
local k = KEYS[1]
local v = redis.call('GET', k)
if not v then return 0 end
local st = string.byte(v, 1)
if st ~= 49 and st ~= 50 then return 0 end
local n = tonumber(string.sub(v, 62, 66))
if not n or n == 0 or string.sub(v, 67, 66 + n) ~= ARGV[1] then return 0 end
redis.call('DEL', k)
notify(k)
return 1
`)

// timeScript returns Redis's TIME: seconds and microseconds. It names a
// key, never written, so that every client type sends it to the server
// that owns that key (see Store.Now).
var timeScript = redis.NewScript(`
return redis.call('TIME')
`)

// deleteScript deletes a record in any state and notifies waiters.
//
//	KEYS[1] record key
//
// It returns 1 when there was a record, 0 otherwise.
var deleteScript = redis.NewScript(notifyLua + `
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
notify(KEYS[1])
return 1
`)
