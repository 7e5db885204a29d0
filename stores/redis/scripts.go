package redisstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Each state change that needs a check is one Lua script, so it is atomic
// on the server and costs one round trip. Every script touches exactly one
// key (KEYS[1]), which makes them valid on Redis Cluster. The scripts read
// the record's fixed header (see codec.go: state at byte 1, lease end at
// 2-21, expiry at 22-41, created at 42-61, token length at 62-66, token
// from 67, in Lua's 1-based positions) and compare times as equal-length
// digit strings. Times come from the engine; the scripts never read the
// server's clock. Each write sets the key's TTL (PX) to the record's
// remaining lifetime, so Redis reclaims it by itself.
//
// The scripts run as few commands as they can: a completion is GET, SET
// and PUBLISH; a release GET, DEL and PUBLISH.

// claimScript takes the key or returns the record that blocks it. Claim
// first sends the script's first command on its own, which settles every
// case but one: a record that Redis still holds but that has ended at now.
// Only then does it run the script, which takes such a record over.
//
//	KEYS[1] record key
//	ARGV    now, new in-progress record, TTL in ms
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
return 1
`)

// heldPrelude loads the record into v and returns 0 from the script
// unless it is in progress and holds the token ARGV[1]; n is the token's
// length. When ARGV[sync] is "1" (WithReplicas), a completed record has
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

// completeScript stores the response of a held claim.
//
//	KEYS[1] record key
//	ARGV    token, now, expires at, TTL in ms, response head, body,
//	        notify channel, record id, and "1" under WithReplicas
//
// It returns 1 when the record was completed, 0 when the claim is lost,
// and 2 (under WithReplicas) when the record is completed already.
var completeScript = redis.NewScript(heldPrelude(9) + `
if not (ARGV[2] < string.sub(v, 2, 21)) then return 0 end
redis.call('SET', k, '2' .. string.rep('0', 20) .. ARGV[3] .. string.sub(v, 42, 61) .. '00000' ..
  string.sub(v, 67 + n) .. ARGV[5] .. ARGV[6], 'PX', ARGV[4])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
`)

// releaseScript deletes a held, in-progress claim.
//
//	KEYS[1] record key
//	ARGV    token, notify channel, record id
//
// It returns 1 when the record was deleted, 0 when the claim is lost.
var releaseScript = redis.NewScript(heldPrelude(0) + `
redis.call('DEL', k)
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
`)

// extendScript moves the lease end (and with it the expiry) of a held
// claim.
//
//	KEYS[1] record key
//	ARGV    token, now, new lease end, TTL in ms, and "1" under
//	        WithReplicas
//
// It returns 1 when the lease moved, 0 when the claim is lost, and 2
// (under WithReplicas) when the record is completed.
var extendScript = redis.NewScript(heldPrelude(5) + `
if not (ARGV[2] < string.sub(v, 2, 21)) then return 0 end
redis.call('SET', k, '1' .. ARGV[3] .. ARGV[3] .. string.sub(v, 42), 'PX', ARGV[4])
return 1
`)

// deleteScript deletes a record in any state and notifies waiters.
//
//	KEYS[1] record key
//	ARGV    notify channel, record id
//
// It returns 1 when there was a record, 0 otherwise.
var deleteScript = redis.NewScript(`
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
`)
