package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idem/core/store"
)

// Client is what a Store sends its calls through. *dynamodb.Client
// satisfies it, and so does any wrapper with the same methods (for
// tracing, or a test double that counts calls). CreateTable needs a
// *dynamodb.Client, or another type that also has CreateTable,
// DescribeTable, UpdateTimeToLive and DescribeTimeToLive.
type Client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// maxClaimAttempts bounds how often Claim tries again when DynamoDB
// refused its write without returning the item that blocked it (an
// emulator without ReturnValuesOnConditionCheckFailure) and the item read
// back had meanwhile gone or ended.
const maxClaimAttempts = 5

// sizeReserve is what a completion's size estimate sets aside for the
// attributes it does not know (the fingerprint) and DynamoDB's own
// rounding; a completion that still does not fit is sent again one
// encoding level down (see encodeResult).
const sizeReserve = 2048

// Store is a store.Store on one DynamoDB table. It also implements
// store.Getter, store.Deleter, store.Extender and store.Evicter;
// ExactlyOnce returns a view that also implements store.TxBeginner. It
// implements no store.ExpiredDeleter (DynamoDB's TTL removes expired
// items), no store.Notifier (the engine's wait mode polls) and no
// store.Clock (DynamoDB tells no time: instances rely on their hosts'
// clocks, NTP).
//
// Each method is usually one request to DynamoDB: Claim a conditional
// PutItem, Complete and Extend a conditional UpdateItem, Release and Evict
// a conditional DeleteItem, Get a strongly consistent GetItem. More are
// sent in these cases: a body too large for the record's item goes into
// chunk items (see the package docs, "Large results"), which Complete
// writes with the record in one TransactWriteItems instead, and which a
// replay (Claim) and Get read with one BatchGetItem more (more only for
// chunks DynamoDB leaves unprocessed); a completion DynamoDB refuses for
// its size is sent again in the next form, and a TransactWriteItems
// cancelled for a TransactionConflict is sent again; on an emulator that
// does not return the blocking item, Claim reads it with a GetItem. A
// Store is safe for concurrent use and holds nothing but its settings.
type Store struct {
	client     Client
	table      string
	pk, sk     string
	skValue    string
	skPrefix   bool
	keyPrefix  string
	attrs      Attributes
	maxItem    int
	compressAt int
	fixedSize  int // the size of a completed item without its result and fingerprint
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Getter   = (*Store)(nil)
	_ store.Deleter  = (*Store)(nil)
	_ store.Extender = (*Store)(nil)
	_ store.Evicter  = (*Store)(nil)
)

// New returns a Store that keeps its records in a table through client
// (a *dynamodb.Client, say). It does not touch DynamoDB: create the table
// with CreateTable, or as the package docs describe. New fails only on a
// nil client or an option it cannot use (an error wrapping ErrBadOption).
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("dynamostore: New: the client is nil")
	}
	c := config{table: DefaultTable, pk: DefaultPartitionKey, maxItem: MaxItemSize}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	c.attrs = c.attrs.merge(defaultAttributes())
	if err := c.validate(); err != nil {
		return nil, err
	}
	s := &Store{
		client: client, table: c.table, pk: c.pk, sk: c.sk, skValue: c.skValue,
		skPrefix: c.skPrefix, keyPrefix: c.keyPrefix, attrs: c.attrs,
		maxItem: c.maxItem, compressAt: c.compressAt,
	}
	s.fixedSize = s.itemOverhead()
	return s, nil
}

// itemOverhead estimates the bytes of a completed item other than its
// result's head and body and its fingerprint's value: the names of
// every attribute, the keys, a 64-byte token and the numbers.
func (s *Store) itemOverhead() int {
	n := len(s.pk) + len(s.keyPrefix) + 32 + 64
	if s.sk != "" {
		n += len(s.sk) + len(s.skValue) + 32
	}
	for _, f := range s.attrs.fields() {
		n += len(f.name) + 24
	}
	return n
}

// Table returns the name of the Store's table.
func (s *Store) Table() string { return s.table }

// Key returns the primary key of the item that holds the record for
// (scope, key), for operators and tests.
func (s *Store) Key(scope, key string) map[string]types.AttributeValue {
	id := recordID(scope, key)
	k := map[string]types.AttributeValue{s.pk: attrS(s.keyPrefix + id)}
	if s.sk != "" {
		v := s.skValue
		if s.skPrefix {
			v += id
		}
		k[s.sk] = attrS(v)
	}
	return k
}

// Claim implements store.Store with one conditional PutItem, which returns
// the item that blocked it in the same call
// (ReturnValuesOnConditionCheckFailure ALL_OLD); a completed record whose
// body is in chunk items costs one BatchGetItem more, for the chunks.
// Expired items that DynamoDB's TTL has not removed yet are taken over
// like absent ones.
//
// An item in progress that holds c.Token is this claim's own: the SDK
// sends the PutItem again when its response was lost (a reset
// connection, a 5xx) after DynamoDB applied it, and the second attempt
// fails its condition on what the first one wrote. Tokens are random per
// claim, so no other claim holds it, and the claim is acquired.
func (s *Store) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	in, err := s.claimInput(&c)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("dynamostore: claim: %w", err)
	}
	for range maxClaimAttempts {
		_, err := s.client.PutItem(ctx, in)
		if err == nil {
			return store.ClaimResult{Acquired: true}, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return store.ClaimResult{}, fmt.Errorf("dynamostore: claim: %w", err)
		}
		item := ccf.Item
		if item == nil {
			// An emulator that does not return the item: read it.
			out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: &s.table, Key: s.Key(c.Scope, c.Key), ConsistentRead: new(true),
			})
			if err != nil {
				return store.ClaimResult{}, fmt.Errorf("dynamostore: claim: read the blocking record: %w", err)
			}
			item = out.Item
		}
		if item == nil {
			continue // gone meanwhile: try again
		}
		if s.heldBy(item, c.Token) {
			return store.ClaimResult{Acquired: true}, nil
		}
		rec, ch, err := s.decodeRecord(item)
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("dynamostore: claim, key %q: %w", c.Key, err)
		}
		if ccf.Item == nil && rec.Takeable(c.Now) {
			continue // read back after it ended: try again, without its chunks
		}
		if rec, err = s.readChunks(ctx, s.Key(c.Scope, c.Key), rec, ch); err != nil {
			return store.ClaimResult{}, fmt.Errorf("dynamostore: claim, key %q: %w", c.Key, err)
		}
		return store.ClaimResult{Existing: &rec}, nil
	}
	return store.ClaimResult{}, fmt.Errorf("dynamostore: claim: the record kept changing over %d attempts", maxClaimAttempts)
}

// claimInput builds the claim's PutItem: the whole new record, written
// when claimCondition holds.
func (s *Store) claimInput(c *store.Claim) (*dynamodb.PutItemInput, error) {
	now, err := nanos(c.Now)
	if err != nil {
		return nil, err
	}
	leaseEnd, err := nanos(c.LeaseEnd)
	if err != nil {
		return nil, err
	}
	a := &s.attrs
	item := s.Key(c.Scope, c.Key)
	item[a.Fingerprint] = attrB([]byte(c.Fingerprint))
	item[a.Token] = attrB([]byte(c.Token))
	item[a.State] = attrN(int64(store.InProgress))
	item[a.CreatedAt] = attrN(now)
	item[a.CreatedSec] = attrN(c.Now.Unix())
	item[a.LeaseEnd] = attrN(leaseEnd)
	item[a.ExpiresAt] = attrN(leaseEnd)
	item[a.TTL] = attrN(ceilSec(keepUntil(c.Now, c.LeaseEnd)))
	return &dynamodb.PutItemInput{
		TableName:                           &s.table,
		Item:                                item,
		ConditionExpression:                 new(claimCondition),
		ExpressionAttributeNames:            s.names("#pk", "#ex", "#st", "#le"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": attrN(now), ":ip": attrN(int64(store.InProgress))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, nil
}

// Complete implements store.Store with one conditional UpdateItem. A
// result that would make the item larger than DynamoDB's 400 KB (or
// WithMaxItemSize) is stored as the package docs say ("Large results"):
// its body gzipped, or in chunk items written with the record in one
// TransactWriteItems, or left out; never refused. The head is always
// kept; a result without one, which the engine never passes, is refused
// with an error, writing nothing.
func (s *Store) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	return s.complete(ctx, "complete", h, &c, nil)
}

// Release implements store.Store with one conditional DeleteItem.
func (s *Store) Release(ctx context.Context, h store.Hold) error {
	return s.deleteHeld(ctx, "release", h, heldCondition, "#tok", "#st")
}

// Evict implements store.Evicter with one conditional DeleteItem: the
// record goes, in progress or completed, only while it holds h.Token.
func (s *Store) Evict(ctx context.Context, h store.Hold) error {
	return s.deleteHeld(ctx, "evict", h, "#tok = :tok", "#tok")
}

func (s *Store) deleteHeld(ctx context.Context, op string, h store.Hold, cond string, ph ...string) error {
	vals := map[string]types.AttributeValue{":tok": attrB([]byte(h.Token))}
	if strings.Contains(cond, ":ip") {
		vals[":ip"] = attrN(int64(store.InProgress))
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: s.Key(h.Scope, h.Key), ConditionExpression: &cond,
		ExpressionAttributeNames: s.names(ph...), ExpressionAttributeValues: vals,
	})
	return s.held(op, err)
}

// held turns a token-conditioned write's error into the Store's.
func (s *Store) held(op string, err error) error {
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ccf):
		return store.ErrLeaseLost
	}
	return fmt.Errorf("dynamostore: %s: %w", op, err)
}

// Extend implements store.Extender with one conditional UpdateItem. The
// item's TTL moves to leaseEnd + (leaseEnd − CreatedAt), computed by
// DynamoDB from the item's created_s.
func (s *Store) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	le, err := nanos(leaseEnd)
	if err != nil {
		return fmt.Errorf("dynamostore: extend: %w", err)
	}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &s.table,
		Key:                      s.Key(h.Scope, h.Key),
		UpdateExpression:         new("SET #le = :le, #ex = :le, #ttl = :twice - #cs"),
		ConditionExpression:      new(heldCondition),
		ExpressionAttributeNames: s.names("#le", "#ex", "#ttl", "#cs", "#tok", "#st"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":le": attrN(le), ":twice": attrN(twiceSec(leaseEnd)),
			":tok": attrB([]byte(h.Token)), ":ip": attrN(int64(store.InProgress)),
		},
	})
	return s.held("extend", err)
}

// Get implements store.Getter with one strongly consistent GetItem, and
// one BatchGetItem for a live record whose body is in chunk items. A
// record past its ExpiresAt is reported gone, whether or not DynamoDB's
// TTL has removed it yet, and its chunks are not read.
func (s *Store) Get(ctx context.Context, r store.Ref, now time.Time) (store.Record, bool, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: s.Key(r.Scope, r.Key), ConsistentRead: new(true),
	})
	if err != nil {
		return store.Record{}, false, fmt.Errorf("dynamostore: get: %w", err)
	}
	if out.Item == nil {
		return store.Record{}, false, nil
	}
	rec, ch, err := s.decodeRecord(out.Item)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("dynamostore: get, key %q: %w", r.Key, err)
	}
	if !now.Before(rec.ExpiresAt) {
		return store.Record{}, false, nil
	}
	if rec, err = s.readChunks(ctx, s.Key(r.Scope, r.Key), rec, ch); err != nil {
		return store.Record{}, false, fmt.Errorf("dynamostore: get, key %q: %w", r.Key, err)
	}
	return rec, true, nil
}

// Delete implements store.Deleter with one DeleteItem. It reports
// whether an item was there, expired or not.
func (s *Store) Delete(ctx context.Context, r store.Ref) (bool, error) {
	out, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: s.Key(r.Scope, r.Key), ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil {
		return false, fmt.Errorf("dynamostore: delete: %w", err)
	}
	return len(out.Attributes) > 0, nil
}
