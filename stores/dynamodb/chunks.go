package dynamostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idem/core/store"
)

// A result's body too large for the record's item, even gzipped, goes
// into chunk items written in the completion's TransactWriteItems. A
// chunk item's partition key is the record's followed by
// ".<16 hex digits of the token's SHA-256>.<index>" (its sort key, if
// any, is the record's), so a new claim's chunks never meet an old
// one's; it holds the Body and TTL attributes, its TTL the record's
// expiry. Chunks are never deleted by the Store: DynamoDB's TTL removes
// them with their record, or after it was deleted or taken over.

// maxTxBytes is DynamoDB's bound on a TransactWriteItems: 4 MB in all
// (taken as decimal megabytes, the smaller reading).
const maxTxBytes = 4_000_000

// limits returns the bounds of a completion by token that carries the
// handler's own writes.
func (s *Store) limits(token string, handler []types.TransactWriteItem) limits {
	return limits{
		budget:     s.maxItem - s.fixedSize - len(token) - sizeReserve,
		chunkSize:  s.maxItem - s.chunkOverhead(),
		maxChunks:  100 - 1 - len(handler),
		maxChunked: maxTxBytes - s.maxItem - 64*1024 - writesSize(handler),
		compressAt: s.compressAt,
	}
}

// writesSize estimates what the handler's writes add to a transaction:
// their items, keys and expression values, generously.
func writesSize(items []types.TransactWriteItem) int {
	n := 0
	for _, it := range items {
		switch {
		case it.Put != nil:
			n += mapSize(it.Put.Item) + mapSize(it.Put.ExpressionAttributeValues)
		case it.Update != nil:
			n += mapSize(it.Update.Key) + mapSize(it.Update.ExpressionAttributeValues) + len(aws.ToString(it.Update.UpdateExpression))
		case it.Delete != nil:
			n += mapSize(it.Delete.Key)
		case it.ConditionCheck != nil:
			n += mapSize(it.ConditionCheck.Key)
		}
		n += 256
	}
	return n
}

func mapSize(m map[string]types.AttributeValue) int {
	n := 0
	for k, v := range m {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s) + 1
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b) + 1
		}
		return n
	case *types.AttributeValueMemberNS:
		return 22 * len(v.Value)
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberM:
		return 3 + mapSize(v.Value) + len(v.Value)
	}
	return 22 // N, BOOL, NULL
}

// chunkOverhead is what a chunk item takes besides its body, generously.
func (s *Store) chunkOverhead() int {
	n := len(s.pk) + len(s.keyPrefix) + 32 + 40 + len(s.attrs.Body) + len(s.attrs.TTL) + 64
	if s.sk != "" {
		n += len(s.sk) + len(s.skValue) + 32
	}
	return n + 512
}

// chunkKey returns the key of chunk i of the body that the claim token
// completed under the record whose key is rec.
func (s *Store) chunkKey(rec map[string]types.AttributeValue, token []byte, i int) map[string]types.AttributeValue {
	k := maps.Clone(rec)
	pk, _ := rec[s.pk].(*types.AttributeValueMemberS)
	if pk == nil {
		return k
	}
	sum := sha256.Sum256(token)
	k[s.pk] = attrS(pk.Value + "." + hex.EncodeToString(sum[:8]) + "." + strconv.Itoa(i))
	return k
}

// chunkPuts returns the writes that store e's chunks.
func (s *Store) chunkPuts(rec map[string]types.AttributeValue, token string, e *encoded, expiresAt time.Time) []types.TransactWriteItem {
	puts := make([]types.TransactWriteItem, len(e.chunks))
	for i, c := range e.chunks {
		item := s.chunkKey(rec, []byte(token), i)
		item[s.attrs.Body] = attrB(c)
		item[s.attrs.TTL] = attrN(ceilSec(expiresAt))
		puts[i] = types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: item}}
	}
	return puts
}

// readChunks sets the body of r, a record decoded from the item under key
// rec, from the chunk items ch names, read with one strongly consistent
// BatchGetItem (more only for keys DynamoDB leaves unprocessed); it
// returns r as it is when ch names none. Its callers decode the record
// and check its expiry first: TTL deletes an expired record's items
// lazily and in no order, so an expired record may have lost chunks,
// and is not corrupt for that.
func (s *Store) readChunks(ctx context.Context, rec map[string]types.AttributeValue, r store.Record, ch chunked) (store.Record, error) {
	if ch.n == 0 {
		return r, nil
	}
	keys := make([]map[string]types.AttributeValue, ch.n)
	index := make(map[string]int, ch.n)
	for i := range keys {
		keys[i] = s.chunkKey(rec, ch.token, i)
		index[keys[i][s.pk].(*types.AttributeValueMemberS).Value] = i
	}
	parts := make([][]byte, ch.n)
	pending := keys
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == 8 {
			return store.Record{}, fmt.Errorf("reading the body's chunks: %d of %d still unprocessed after %d attempts", len(pending), ch.n, attempt)
		}
		if attempt > 0 {
			if err := sleep(ctx, time.Duration(attempt)*20*time.Millisecond); err != nil {
				return store.Record{}, err
			}
		}
		out, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			s.table: {Keys: pending, ConsistentRead: new(true)},
		}})
		if err != nil {
			return store.Record{}, fmt.Errorf("reading the body's chunks: %w", err)
		}
		for _, it := range out.Responses[s.table] {
			pk, _ := it[s.pk].(*types.AttributeValueMemberS)
			b, _ := it[s.attrs.Body].(*types.AttributeValueMemberB)
			if pk == nil || b == nil {
				continue
			}
			if i, ok := index[pk.Value]; ok {
				parts[i] = b.Value
			}
		}
		pending = out.UnprocessedKeys[s.table].Keys
	}
	var body []byte
	for i, p := range parts {
		if p == nil {
			return store.Record{}, fmt.Errorf("%w: chunk %d of %d of the body is missing", store.ErrCorruptRecord, i+1, ch.n)
		}
		body = append(body, p...)
	}
	if ch.gzip {
		var err error
		if body, err = gunzip(body); err != nil {
			return store.Record{}, fmt.Errorf("%w: the body's chunks: bad gzip data: %w", store.ErrCorruptRecord, err)
		}
	}
	r.Result.Body = body
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
